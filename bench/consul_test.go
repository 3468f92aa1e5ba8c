package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// consulPrefix is the KV folder the Consul benchmarks lock under.
const consulPrefix = "cerberus-bench"

// consulClient makes a client the way consul/api's documentation shows,
// api.DefaultConfig with its pooled transport; each call makes a new
// client, so every benchmark client has its own pool of connections.
func consulClient(b *testing.B, addr string) *api.Client {
	b.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = addr
	c, err := api.NewClient(cfg)
	if err != nil {
		b.Fatalf("consul client: %v", err)
	}
	return c
}

func consulEngine(b *testing.B, addr string, fair bool) *consul.Engine {
	b.Helper()
	e, err := consul.New(consulClient(b, addr), consul.WithPrefix(consulPrefix), consul.WithFair(fair))
	if err != nil {
		b.Fatalf("consul engine: %v", err)
	}
	b.Cleanup(func() { _ = e.Close() })
	return e
}

// consulEngineLock adapts an engine to LockFunc: a renewed exclusive lease,
// waiting, with the shortest lease period the engine honours (its Floor:
// two session TTLs and the lock-delay, 30s with the defaults; it refuses
// shorter ones). The period costs nothing while the holder renews.
func consulEngineLock(e *consul.Engine, key string) LockFunc {
	ttl := e.Limits().MinTTL
	return func(ctx context.Context) (func() error, error) {
		l, err := e.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: ttl, Renew: true, Wait: true})
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(context.Background()) }, nil
	}
}

// apiLock adapts consul/api's Lock: a new Lock (and so a new session) per
// acquisition, as its documentation shows; Unlock stops the session's
// renewal, which destroys it.
func apiLock(c *api.Client, key string) LockFunc {
	return func(ctx context.Context) (func() error, error) {
		lk, err := c.LockOpts(&api.LockOptions{Key: key})
		if err != nil {
			return nil, err
		}
		stop := make(chan struct{})
		cancel := context.AfterFunc(ctx, func() { close(stop) })
		defer cancel()
		lost, err := lk.Lock(stop)
		if err != nil {
			return nil, err
		}
		if lost == nil {
			return nil, errors.Join(errors.New("api.Lock: stopped"), ctx.Err())
		}
		return lk.Unlock, nil
	}
}

func runID() string { return fmt.Sprintf("%x", time.Now().UnixNano()) }

// BenchmarkConsulUncontended: lock+unlock cycles on fresh keys, one client:
// the cerberus engine (one session for all its leases) against api.Lock
// (a session per lock).
func BenchmarkConsulUncontended(b *testing.B) {
	once(b, func() {
		addr := testenv.ConsulAddr(b)
		run := runID()
		e := consulEngine(b, addr, false)
		c := consulClient(b, addr)
		ours, theirs := 0, 0
		libs := []Cycle{
			{"cerberus-consul", func(ctx context.Context) (func() error, error) {
				ours++
				return consulEngineLock(e, fmt.Sprintf("unc/%s/%d", run, ours))(ctx)
			}},
			{"consul-api-lock", func(ctx context.Context) (func() error, error) {
				theirs++
				return apiLock(c, fmt.Sprintf("%s/api-unc/%s/%d", consulPrefix, run, theirs))(ctx)
			}},
		}
		rates := interleavedRates(b, "", libs)
		Ratio(out, "uncontended_cycles_per_s", "cerberus-consul", "consul-api-lock", rates["cerberus-consul"], rates["consul-api-lock"])
		// api.Lock leaves its released keys behind; tidy them.
		_, _ = c.KV().DeleteTree(consulPrefix+"/api-unc/"+run+"/", nil)
	})
}

// BenchmarkConsulHotKey: clients with their own connections on one key,
// holding it for -hold each time: the engine in default and fair mode
// against api.Lock.
func BenchmarkConsulHotKey(b *testing.B) {
	once(b, func() {
		addr := testenv.ConsulAddr(b)
		run := runID()
		maxWait := *hotKeyDur + 30*time.Second
		var results []HotKeyResult
		for _, fair := range []bool{false, true} {
			name := "cerberus-consul"
			if fair {
				name += "-fair"
			}
			key := "hot/" + run + "/" + name
			results = append(results, hotKey(name, func() LockFunc { return consulEngineLock(consulEngine(b, addr, fair), key) }, maxWait))
		}
		key := consulPrefix + "/api-hot/" + run
		api := hotKey("consul-api-lock", func() LockFunc { return apiLock(consulClient(b, addr), key) }, maxWait)
		for _, r := range append(results, api) {
			r.Report(out)
		}
		for _, r := range results {
			Ratio(out, "hotkey_acq_per_s", r.Name, api.Name, r.Rate(), api.Rate())
			Ratio(out, "hotkey_wait_p99", api.Name, r.Name, float64(api.WaitP99), float64(r.WaitP99))
		}
		_, _ = consulClient(b, addr).KV().Delete(key, nil)
	})
}

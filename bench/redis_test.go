package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// redisSetup gives each benchmark its own key prefix and deletes everything
// under it afterwards (fence counters included).
func redisSetup(b *testing.B) (addr, prefix string, admin *goredis.Client) {
	b.Helper()
	addr = testenv.RedisAddr(b)
	prefix = fmt.Sprintf("cerberus-bench:%d:", time.Now().UnixNano())
	admin = goredis.NewClient(&goredis.Options{Addr: addr})
	b.Cleanup(func() {
		ctx := context.Background()
		iter := admin.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			if keys = append(keys, iter.Val()); len(keys) == 1000 {
				admin.Unlink(ctx, keys...)
				keys = keys[:0]
			}
		}
		if len(keys) > 0 {
			admin.Unlink(ctx, keys...)
		}
		_ = admin.Close()
	})
	return addr, prefix, admin
}

// newRedisClient is a go-redis client with its default options, as every
// library's docs show it; pool > 0 sets PoolSize.
func newRedisClient(b *testing.B, addr string, pool int) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: pool})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func newCerberusRedis(b *testing.B, addr, prefix string, opts ...redis.Option) *cerberus.Client {
	e, err := redis.New(newRedisClient(b, addr, 0), append([]redis.Option{redis.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	c, err := cerberus.New(e)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// peerTTL is the expiry redsync uses by default; redislock, which has no
// default, and cerberus's fixed-TTL runs are given the same.
const peerTTL = 8 * time.Second

// redisLockers builds one LockFunc per client for each library, each client
// with its own go-redis client (and so its own pool) on the same server.
type redisLockers struct {
	name  string
	build func(b *testing.B, key string) LockFunc
	// contended is false for a loop that cannot wait (the floor).
	contended bool
}

// cerberusLocker is cerberus on the Redis engine with opts; ttl 0 is the
// default watchdog lease, otherwise a fixed TTL.
func cerberusLocker(addr, prefix string, ttl time.Duration, opts ...redis.Option) func(b *testing.B, key string) LockFunc {
	return func(b *testing.B, key string) LockFunc {
		c := newCerberusRedis(b, addr, prefix, opts...)
		var lockOpts []cerberus.Option
		if ttl > 0 {
			lockOpts = append(lockOpts, cerberus.WithTTL(ttl))
		}
		return func(ctx context.Context) (func() error, error) {
			l, err := c.Lock(ctx, key, lockOpts...)
			if err != nil {
				return nil, err
			}
			return func() error { return l.Unlock(context.Background()) }, nil
		}
	}
}

// floorRelease is the compare-and-delete every Redis lock runs on release.
var floorRelease = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// redisLibraries lists the libraries under test, each with the options its
// own docs show: redsync v4 with redsync.New and NewMutex (8s expiry, 32
// tries 50-250ms apart), redislock with Obtain and the LinearBackoff retry
// of its examples (100ms; its default is not to retry at all) and the
// same 8s TTL, cerberus with cerberus.New and Lock (a watchdog lease, the
// default unordered mode with its 10ms starvation bound), in fair mode, and
// both again with an 8s fixed TTL. "floor" is no lock library: a bare SET NX
// PX and a compare-and-delete script with go-redis, the two round trips any
// Redis lock needs.
func redisLibraries(addr, prefix string) []redisLockers {
	return []redisLockers{
		{"cerberus", cerberusLocker(addr, prefix, 0), true},
		{"cerberus-fair", cerberusLocker(addr, prefix, 0, redis.WithFair(true)), true},
		{"cerberus-ttl", cerberusLocker(addr, prefix, peerTTL), true},
		{"cerberus-fair-ttl", cerberusLocker(addr, prefix, peerTTL, redis.WithFair(true)), true},
		{"redsync", func(b *testing.B, key string) LockFunc {
			rs := redsync.New(redsyncgoredis.NewPool(newRedisClient(b, addr, 0)))
			return func(ctx context.Context) (func() error, error) {
				m := rs.NewMutex(prefix + key)
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func() error { _, err := m.UnlockContext(context.Background()); return err }, nil
			}
		}, true},
		{"redislock", func(b *testing.B, key string) LockFunc {
			locker := redislock.New(newRedisClient(b, addr, 0))
			opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond)}
			return func(ctx context.Context) (func() error, error) {
				l, err := locker.Obtain(ctx, prefix+key, peerTTL, opt)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(context.Background()) }, nil
			}
		}, true},
		{"floor", func(b *testing.B, key string) LockFunc {
			c := newRedisClient(b, addr, 0)
			k := prefix + key
			return func(ctx context.Context) (func() error, error) {
				ok, err := c.SetNX(ctx, k, "floor", peerTTL).Result()
				if err != nil {
					return nil, err
				}
				if !ok {
					return nil, fmt.Errorf("floor: %s is held", k)
				}
				return func() error { return floorRelease.Run(context.Background(), c, []string{k}, "floor").Err() }, nil
			}
		}, false},
	}
}

// uncontendedLibraries are the runs of the uncontended and allocation
// figures: fair mode changes nothing without a waiter.
func uncontendedLibraries(addr, prefix string) []redisLockers {
	var libs []redisLockers
	for _, lib := range redisLibraries(addr, prefix) {
		if !strings.Contains(lib.name, "fair") {
			libs = append(libs, lib)
		}
	}
	return libs
}

// BenchmarkRedisUncontended: one client, lock+unlock cycles on one key.
func BenchmarkRedisUncontended(b *testing.B) {
	once(b, func() {
		addr, prefix, _ := redisSetup(b)
		var libs []Cycle
		for _, lib := range uncontendedLibraries(addr, prefix) {
			lock := lib.build(b, "uncontended/"+lib.name)
			warm(lock)
			libs = append(libs, Cycle{"redis/" + lib.name, lock})
		}
		rates := interleavedRates(b, "redis/", libs)
		for _, name := range []string{"cerberus", "cerberus-ttl", "redislock", "floor"} {
			Ratio(out, "redis_uncontended_cycles", name, "redsync", rates[name], rates["redsync"])
		}
		Ratio(out, "redis_uncontended_cycles", "cerberus", "floor", rates["cerberus"], rates["floor"])
		Ratio(out, "redis_uncontended_cycles", "redsync", "floor", rates["redsync"], rates["floor"])
	})
}

// BenchmarkRedisHotKey: 16 clients on one key, 1 ms critical section.
func BenchmarkRedisHotKey(b *testing.B) {
	once(b, func() {
		addr, prefix, _ := redisSetup(b)
		var libs []redisLockers
		var names, full []string
		for _, lib := range redisLibraries(addr, prefix) {
			if lib.contended {
				libs, names, full = append(libs, lib), append(names, lib.name), append(full, "redis/"+lib.name)
			}
		}
		// Interleaved in rounds: the libraries run one after the other,
		// never at once, and the machine's other load falls on each alike.
		res := map[string]HotKeyResult{}
		for i, r := range hotKeyRounds(full, func(i int) LockFunc { return libs[i].build(b, "hot/"+libs[i].name) }, 30*time.Second) {
			r.Report(out)
			res[names[i]] = r
		}
		rs := res["redsync"]
		for _, name := range names {
			if name == "redsync" {
				continue
			}
			r := res[name]
			Ratio(out, "redis_hotkey_acq", name, "redsync", r.Rate(), rs.Rate())
			Ratio(out, "redis_hotkey_wait_p99", name, "redsync", float64(r.WaitP99), float64(rs.WaitP99))
			Ratio(out, "redis_hotkey_fairness", name, "redsync", r.Fairness(), rs.Fairness())
			Ratio(out, "redis_hotkey_handoff_p50", name, "redsync", float64(r.HandoffP50), float64(rs.HandoffP50))
		}
		// The most any lock could reach against redsync here: its own run's
		// sections back to back with no handoff.
		Ratio(out, "redis_hotkey_acq", "ceiling", "redsync", rs.Ceiling(), rs.Rate())
		// The floor of a hand-off through Redis: one PUBLISH from one
		// connection to a subscriber on another, as go-redis delivers it.
		floor := pubSubFloor(b, addr, prefix+"floor", 2000)
		fmt.Fprintf(out, "BENCH hotkey redis/floor handoff_p50_us=%.1f\n", us(floor))
		for _, name := range names {
			Ratio(out, "redis_hotkey_handoff_p50", name, "floor", float64(res[name].HandoffP50), float64(floor))
		}
	})
}

// pubSubFloor is the median time from sending a PUBLISH on one go-redis
// client to its delivery on another's subscription channel, over n
// messages sent one at a time.
func pubSubFloor(b *testing.B, addr, channel string, n int) time.Duration {
	pub, sub := newRedisClient(b, addr, 0), newRedisClient(b, addr, 0)
	ctx := context.Background()
	ps := sub.Subscribe(ctx, channel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		b.Fatal(err)
	}
	ch := ps.Channel()
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := pub.Publish(ctx, channel, "x").Err(); err != nil {
			b.Fatal(err)
		}
		select {
		case <-ch:
			lat = append(lat, time.Since(t0))
		case <-time.After(time.Second):
			b.Fatal("pub/sub floor: a message was not delivered")
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2]
}

// BenchmarkRedisAllocs: heap allocations per lock+unlock cycle.
func BenchmarkRedisAllocs(b *testing.B) {
	once(b, func() {
		addr, prefix, _ := redisSetup(b)
		allocs := map[string]float64{}
		libs := uncontendedLibraries(addr, prefix)
		for _, lib := range libs {
			lock := lib.build(b, "allocs/"+lib.name)
			warm(lock)
			const n = 1000
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range n {
				u, err := lock(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if err := u(); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			a := float64(after.Mallocs-before.Mallocs) / n
			allocs[lib.name] = a
			fmt.Fprintf(out, "BENCH allocs redis/%s allocs_per_cycle=%.1f bytes_per_cycle=%.0f\n", lib.name, a, float64(after.TotalAlloc-before.TotalAlloc)/n)
		}
		for _, lib := range libs {
			if lib.name != "redsync" {
				Ratio(out, "redis_allocs_per_cycle", lib.name, "redsync", allocs[lib.name], allocs["redsync"])
			}
		}
	})
}

// BenchmarkRedisScale: 100,000 locks held at once from one process with
// renewal on: memory per held lock, renewal commands per second, CPU, and
// goroutines, which must not grow with the number of locks.
func BenchmarkRedisScale(b *testing.B) {
	once(b, func() {
		addr, prefix, admin := redisSetup(b)
		const n = 100_000
		watchdog := 15 * time.Second // renewed every 5s: 20,000 renewals/s for 100,000 locks
		e, err := redis.New(newRedisClient(b, addr, 32), redis.WithPrefix(prefix))
		if err != nil {
			b.Fatal(err)
		}
		c, err := cerberus.New(e, cerberus.WithWatchdog(watchdog))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		goroutinesBefore := runtime.NumGoroutine()

		leases := make([]*cerberus.Lease, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
					l, err := c.TryLock(context.Background(), fmt.Sprintf("scale/%d", i))
					if err != nil {
						b.Error(err)
						return
					}
					leases[i] = l
				}
			}()
		}
		wg.Wait()
		fmt.Fprintf(out, "BENCH scale redis/cerberus acquire_%d_s=%.2f\n", n, time.Since(start).Seconds())
		runtime.GC()
		var held runtime.MemStats
		runtime.ReadMemStats(&held)
		goroutinesHeld := runtime.NumGoroutine()

		calls := func() int64 {
			info := admin.Info(context.Background(), "commandstats").Val()
			for _, line := range strings.Split(info, "\n") {
				if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
					var v int64
					fmt.Sscanf(rest, "%d", &v)
					return v
				}
			}
			return 0
		}
		cpu := func() time.Duration {
			var ru syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		window := 10 * time.Second
		c0, cpu0, t0 := calls(), cpu(), time.Now()
		time.Sleep(window)
		c1, cpu1, el := calls(), cpu(), time.Since(t0)
		lost := 0
		for _, l := range leases {
			if l != nil && l.Err() != nil {
				lost++
			}
		}
		fmt.Fprintf(out, "BENCH scale redis/cerberus held=%d\n", n)
		fmt.Fprintf(out, "BENCH scale redis/cerberus heap_bytes_per_lock=%.0f\n", float64(int64(held.HeapAlloc)-int64(before.HeapAlloc))/n)
		fmt.Fprintf(out, "BENCH scale redis/cerberus renew_cmds_per_s=%.0f\n", float64(c1-c0)/el.Seconds())
		fmt.Fprintf(out, "BENCH scale redis/cerberus cpu_percent_while_renewing=%.1f\n", 100*float64(cpu1-cpu0)/float64(el))
		fmt.Fprintf(out, "BENCH scale redis/cerberus goroutines_before=%d goroutines_holding=%d\n", goroutinesBefore, goroutinesHeld)
		fmt.Fprintf(out, "BENCH scale redis/cerberus lost_while_held=%d\n", lost)
		for _, l := range leases {
			if l != nil {
				_ = l.Unlock(context.Background())
			}
		}
	})
}

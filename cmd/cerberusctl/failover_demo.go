package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/failover"
)

// relay forwards loopback TCP connections to a server until it is cut, so
// the demo can block its primary engine without touching the server itself.
type relay struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	cut    bool
	wg     sync.WaitGroup
}

func startRelay(target string) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", r.target, 2*time.Second)
		if err != nil || !r.track(in, out) {
			_ = in.Close()
			if out != nil {
				_ = out.Close()
			}
			continue
		}
		for _, pair := range [][2]net.Conn{{in, out}, {out, in}} {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				_, _ = io.Copy(pair[0], pair[1])
				_ = pair[0].Close()
				_ = pair[1].Close()
			}()
		}
	}
}

func (r *relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

// cutOff refuses new connections and drops every open one.
func (r *relay) cutOff() {
	r.mu.Lock()
	r.cut = true
	_ = r.ln.Close()
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
}

// close cuts the relay and waits for its goroutines.
func (r *relay) close() {
	r.cutOff()
	r.wg.Wait()
}

// lostCounter is an Observer that counts leases ended without Unlock and
// notes the first grant on ZooKeeper.
type lostCounter struct {
	n       atomic.Int64
	firstZK atomic.Int64 // unix ns
}

func (o *lostCounter) Acquired(e cerberus.AcquireEvent) {
	if e.Err == nil && e.Engine == "zookeeper" {
		o.firstZK.CompareAndSwap(0, time.Now().UnixNano())
	}
}
func (o *lostCounter) Lost(cerberus.LostEvent) { o.n.Add(1) }

// runFailoverDemo runs the seckill demo on Redis (through a relay) with
// ZooKeeper as the secondary, blocks Redis when half the sales are done, and
// shows the switch, the lost leases and the final stock.
func runFailoverDemo(ctx context.Context, cfg demoConfig,
	stdout io.Writer) (*memStock, *tally, error) {
	r, err := startRelay(envOr("CERBERUS_REDIS_ADDR", "127.0.0.1:6379"))
	if err != nil {
		return nil, nil, err
	}
	defer r.close()
	engines, err := failoverEngines(r)
	if err != nil {
		return nil, nil, err
	}
	var (
		switched atomic.Pointer[failover.SwitchEvent]
		switchAt atomic.Int64
	)
	f, err := failover.New(engines,
		failover.Options{Auto: true, Interval: 200 * time.Millisecond, Threshold: 3, Fence: true,
			OnSwitch: func(ev failover.SwitchEvent) {
				switched.Store(&ev)
				switchAt.Store(time.Now().UnixNano())
			}})
	if err != nil {
		for _, ne := range engines {
			_ = ne.Engine.Close()
		}
		return nil, nil, err
	}
	lost := &lostCounter{}
	// Fixed 2s leases: with the fence, the first grant on ZooKeeper waits
	// until every Redis lease must have expired.
	c, err := cerberus.New(f, cerberus.WithTTL(2*time.Second), cerberus.WithObserver(lost))
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	defer c.Close()

	st := newMemStock(cfg.products, cfg.stock)
	t := &tally{}
	half := int64(cfg.buyers / 2)
	var cutAt atomic.Int64
	go func() {
		for t.sold.Load() < half && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		cutAt.Store(time.Now().UnixNano())
		r.cutOff()
	}()
	start := time.Now()
	retries := buyAll(ctx, c, st, cfg, t, start)
	elapsed := time.Since(start)
	ev := switched.Load()
	if ev == nil {
		return nil, nil, fmt.Errorf("the manager never switched away from redis")
	}
	cut := time.Unix(0, cutAt.Load())
	reportFailover(stdout, ev, half, cut, time.Unix(0, switchAt.Load()), lost, t, elapsed, retries)
	return st, t, nil
}

// reportFailover prints what the failover demo saw: the switch ev, after
// half sales, cut the time Redis was cut off, switchAt the time of the
// switch; the leases lost and the first grant on ZooKeeper (lost); and the
// buyers' figures.
func reportFailover(stdout io.Writer, ev *failover.SwitchEvent, half int64,
	cut, switchAt time.Time, lost *lostCounter, t *tally, elapsed time.Duration, retries int64) {
	fmt.Fprintf(stdout, "blocked redis after %d sales; switched %s -> %s (epoch %d, reason %s) %v "+
		"later; leases lost: %d\n",
		half, ev.From, ev.To, ev.Epoch, ev.Reason, switchAt.Sub(cut).Round(time.Millisecond),
		lost.n.Load())
	fmt.Fprintf(stdout, "detection: health 200ms x 3 (at most 600ms), "+
		"quicker when sales hit the outage; "+
		"first grant on zookeeper %v after the switch (the fence: 2s leases)\n",
		time.Duration(lost.firstZK.Load()-switchAt.UnixNano()).Round(time.Millisecond))
	fmt.Fprintf(stdout, "%d acquisitions in %v; fenced writes refused and retried: %d; retries: %d\n",
		t.acquisitions.Load(), elapsed.Round(time.Millisecond), t.fenced.Load(), retries)
}

// failoverEngines are the demo's two engines: Redis behind the relay r,
// which the demo cuts off, and ZooKeeper.
func failoverEngines(r *relay) ([]failover.NamedEngine, error) {
	// The blocked primary makes go-redis log every refused dial; the demo
	// reports the outage itself.
	goredis.SetLogger(quietLogger{})
	rc := goredis.NewClient(&goredis.Options{Addr: r.addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond})
	re, err := redis.New(rc, redis.WithOpTimeout(500*time.Millisecond))
	if err != nil {
		_ = rc.Close()
		return nil, err
	}
	ze, err := zookeeper.Dial([]string{envOr("CERBERUS_ZK_ADDR", "127.0.0.1:2181")},
		zookeeper.WithSessionTimeout(10*time.Second))
	if err != nil {
		_ = re.Close()
		_ = rc.Close()
		return nil, err
	}
	return []failover.NamedEngine{{Name: "redis", Engine: owned{re, rc.Close}},
		{Name: "zookeeper", Engine: ze}}, nil
}

// buyAll runs cfg.buyers buyers over cfg.products products (keys made
// unique by start) until each has bought or ctx ends, and returns how many
// times a buyer tried again.
func buyAll(ctx context.Context, c *cerberus.Client, st *memStock, cfg demoConfig, t *tally,
	start time.Time) int64 {
	var retries atomic.Int64
	var wg sync.WaitGroup
	for i := range cfg.buyers {
		product := i % cfg.products
		key := fmt.Sprintf("cerberus-demo/failover/%d/product/%d", start.UnixNano(), product)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Buy until the decrement is written, the product is sold out
			// or the demo times out: a lost lease or a refused fenced
			// write means try again.
			for ctx.Err() == nil {
				if buyOnce(ctx, c, st, key, product, t) {
					return
				}
				retries.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return retries.Load()
}

// buyOnce is one attempt of a buyer; it reports whether the buyer is done
// (bought, or found the product sold out).
func buyOnce(ctx context.Context, c *cerberus.Client, st stock, key string, product int,
	t *tally) bool {
	l, err := c.Lock(ctx, key)
	if err != nil {
		return false
	}
	defer l.Unlock(context.WithoutCancel(ctx))
	t.acquisitions.Add(1)
	n, err := st.Read(ctx, product)
	if err != nil {
		return false
	}
	if n <= 0 {
		return true
	}
	time.Sleep(5 * time.Millisecond) // the work between read and write
	select {
	case <-l.Done():
		return false // lost before the write: told, so do not write
	default:
	}
	switch err := st.Write(ctx, product, n-1, l.Token()); {
	case errors.Is(err, errFenced):
		t.fenced.Add(1)
		return false
	case err != nil:
		return false
	}
	t.sold.Add(1)
	return true
}

// quietLogger drops go-redis's own log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

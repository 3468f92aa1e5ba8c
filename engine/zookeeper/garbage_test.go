package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
	"github.com/go-zookeeper/zk"
)

// fastContainers makes a private server look for empty containers every
// 100ms (the default is a minute) and delete as many as it finds.
var fastContainers = []string{"-Dznode.container.checkIntervalMs=100", "-Dznode.container.maxPerMinute=10000000"}

// TestNoGarbage locks and releases 10,000 distinct keys, exclusive and
// shared, some with a waiter that gives up. No queue node is left after a
// release (a waiter that gave up removes its node within moments), and the
// server removes every lock node, so the base path ends up with no children
// at all.
func TestNoGarbage(t *testing.T) {
	srv := testenv.StartZooKeeper(t, fastContainers...)
	addr := srv.Addr
	admin := rawConn(t, addr)
	base := zookeeper.DefaultPrefix
	const keys, workers = 10000, 16
	next := atomic.Int64{}
	var failures atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		failures.Add(1)
		firstErr.CompareAndSwap(nil, err)
	}
	engines := make([]*zookeeper.Engine, workers)
	for i := range engines {
		engines[i] = dial(t, addr, zookeeper.WithPrefix(base))
	}
	var wg sync.WaitGroup
	for w := range workers {
		e, other := engines[w], engines[(w+1)%workers]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= keys || failures.Load() > 0 {
					return
				}
				key := fmt.Sprintf("g/%d:订单/%d", i%7, i)
				req := hold(key)
				if i%2 == 1 {
					req.Mode = engine.Shared
				}
				l, err := e.Acquire(bounded(t, time.Minute), req)
				if err != nil {
					fail(err)
					return
				}
				if i%100 == 0 {
					// A waiter that gives up must take its node with it.
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
					_, err := other.Acquire(ctx, hold(key))
					cancel()
					if !errors.Is(err, engine.ErrNotAcquired) {
						fail(fmt.Errorf("waiter on held %q: %v", key, err))
					}
				}
				if err := l.Release(bounded(t, time.Minute)); err != nil {
					fail(err)
					return
				}
				// A waiter that gave up deletes its node in the
				// background (its Acquire returned when its context
				// ended), so allow that a moment.
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					left, err := leftovers(admin, base, key)
					if err == nil && len(left) == 0 {
						break
					}
					if err != nil || time.Now().After(deadline) {
						fail(fmt.Errorf("after releasing %q: left %v, %v", key, left, err))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d failures; first: %v", n, firstErr.Load())
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		left := children(t, admin, base)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lock nodes left under %s two minutes after %d keys were released, e.g. %q", len(left), base, keys, left[0])
		}
	}
}

// TestCrashedHolderLeavesNothing: a holder whose process dies (its
// connection closes without a release) frees the key, and the server
// removes the emptied lock node because it is a container (clients cannot
// see that flag in a Stat; this is how it shows). The private server checks
// containers every 100ms instead of every minute.
func TestCrashedHolderLeavesNothing(t *testing.T) {
	srv := testenv.StartZooKeeper(t, fastContainers...)
	conn, events, err := zk.Connect([]string{srv.Addr}, 4*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	e, err := zookeeper.New(conn, events, zookeeper.WithSessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	l := mustAcquire(t, e, hold("crash"))
	conn.Close() // the "crash": the session ends with the node in place

	admin := rawConn(t, srv.Addr)
	parent := zookeeper.DefaultPrefix + "/" + zookeeper.EncodeKey("crash")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok, _, err := admin.Exists(parent)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists 30s after its holder crashed: %v", parent, children(t, admin, parent))
		}
	}
	waitDone(t, l, 30*time.Second, "closed connection")
	if !errors.Is(l.Err(), engine.ErrLeaseLost) {
		t.Errorf("lease of a closed connection: Err() = %v, want ErrLeaseLost", l.Err())
	}
}

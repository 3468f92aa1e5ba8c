package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

func read(key string) engine.Request {
	r := hold(key)
	r.Mode = engine.Shared
	return r
}

// queued starts a waiting Acquire of req on a new engine and returns once
// its queue node exists, so queue order is call order. The lease or error
// arrives on the returned channel; the flag, if set, is read at the grant.
type queuedResult struct {
	l   engine.Lease
	err error
	ok  bool // the grant saw the condition it was given hold
}

func queue(t *testing.T, addr, base string, req engine.Request, cond func() bool) <-chan queuedResult {
	t.Helper()
	node := make(chan string, 4)
	e := dial(t, addr, zookeeper.WithPrefix(base), zookeeper.WithHooks(func(p string) { node <- p }, nil, nil))
	out := make(chan queuedResult, 1)
	go func() {
		l, err := e.Acquire(bounded(t, time.Minute), req)
		out <- queuedResult{l, err, cond == nil || cond()}
	}()
	select {
	case <-node:
	case <-time.After(30 * time.Second):
		t.Fatalf("%v request on %q did not queue", req.Mode, req.Key)
	}
	return out
}

func granted(t *testing.T, ch <-chan queuedResult, what string) engine.Lease {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		if !r.ok {
			t.Errorf("%s was granted too early", what)
		}
		return r.l
	case <-time.After(30 * time.Second):
		t.Fatalf("%s was not granted (deadlock?)", what)
	}
	return nil
}

// TestReaderBehindWriterIgnoresLaterWriters queues R1 (holding), W1, R2,
// W2. R2 waits for W1 only: once W1 releases, R2 is granted although W2,
// which came after it, still waits; and W2 waits for R2. A reader that
// counted later writers would deadlock with W2 here.
func TestReaderBehindWriterIgnoresLaterWriters(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	key := "rw"
	r1 := mustAcquire(t, dial(t, addr, zookeeper.WithPrefix(base)), read(key))
	var r1Out, w1Out, r2Out atomic.Bool
	w1c := queue(t, addr, base, hold(key), r1Out.Load)
	r2c := queue(t, addr, base, read(key), w1Out.Load)
	w2c := queue(t, addr, base, hold(key), r2Out.Load)

	r1Out.Store(true)
	if err := r1.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	w1 := granted(t, w1c, "W1 after R1")
	w1Out.Store(true)
	if err := w1.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	r2 := granted(t, r2c, "R2 after W1, with the later W2 still queued")
	select {
	case r := <-w2c:
		t.Fatalf("W2 was granted while R2 holds the key: %v", r.err)
	default:
	}
	// A new reader now queues behind W2, and must wait for it: fairness.
	var w2Out atomic.Bool
	r3c := queue(t, addr, base, read(key), w2Out.Load)
	r2Out.Store(true)
	if err := r2.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	w2 := granted(t, w2c, "W2 after R2")
	w2Out.Store(true)
	if err := w2.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	r3 := granted(t, r3c, "R3 after W2")
	for _, pair := range [][2]engine.Lease{{r1, w1}, {w1, r2}, {r2, w2}, {w2, r3}} {
		if pair[1].Token() <= pair[0].Token() {
			t.Errorf("token %d granted after %d", pair[1].Token(), pair[0].Token())
		}
	}
	if err := r3.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if left, err := leftovers(admin, base, key); err != nil || len(left) > 0 {
		t.Errorf("leftovers: %v %v", left, err)
	}
}

// TestSharedInterleavings runs readers and writers on several engines over
// a few keys, some giving up early through their contexts, and requires
// every call to finish (no deadlock), no writer to share a key, and nothing
// left behind.
func TestSharedInterleavings(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	const clients, rounds, keys = 8, 40, 3
	type state struct{ readers, writers atomic.Int64 }
	var st [keys]state
	var violations, failures, cancelled atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	engines := make([]*zookeeper.Engine, clients)
	for c := range clients {
		e := dial(t, addr, zookeeper.WithPrefix(base))
		engines[c] = e
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for range rounds {
				k := rng.IntN(keys)
				req := read(fmt.Sprint("mix/", k))
				writer := rng.IntN(3) == 0
				if writer {
					req.Mode = engine.Exclusive
				}
				limit := time.Minute
				if rng.IntN(5) == 0 {
					limit = time.Duration(rng.IntN(5)) * time.Millisecond // may give up while queued
				}
				ctx, cancel := context.WithTimeout(context.Background(), limit)
				l, err := e.Acquire(ctx, req)
				cancel()
				if err != nil {
					if errors.Is(err, engine.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded) && limit < time.Second {
						cancelled.Add(1)
						continue
					}
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				s := &st[k]
				if writer {
					if s.writers.Add(1) != 1 || s.readers.Load() != 0 {
						violations.Add(1)
					}
					runtime.Gosched()
					s.writers.Add(-1)
				} else {
					s.readers.Add(1)
					if s.writers.Load() != 0 {
						violations.Add(1)
					}
					runtime.Gosched()
					s.readers.Add(-1)
				}
				if err := l.Release(context.Background()); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("readers and writers did not finish: deadlock")
	}
	if n := failures.Load(); n > 0 {
		t.Errorf("%d calls failed; first: %v", n, firstErr.Load())
	}
	if n := violations.Load(); n > 0 {
		t.Errorf("%d times a writer shared a key", n)
	}
	t.Logf("%d acquisitions gave up on their context", cancelled.Load())
	// Close waits for the clean-up of creates abandoned mid-flight.
	for _, e := range engines {
		_ = e.Close()
	}
	for k := range keys {
		if left, err := leftovers(admin, base, fmt.Sprint("mix/", k)); err != nil || len(left) > 0 {
			t.Errorf("leftovers of mix/%d: %v %v", k, left, err)
		}
	}
}

// TestWaiterLeavingMidQueue: W1 holds, W2 and W3 wait, W2 gives up. W3's
// watch on W2 fires, but W1 still holds: W3 must look again and wait for
// W1, not take W2's departure as its turn.
func TestWaiterLeavingMidQueue(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	key := "mid"
	w1 := mustAcquire(t, dial(t, addr, zookeeper.WithPrefix(base)), hold(key))

	queued2 := make(chan string, 4)
	e2 := dial(t, addr, zookeeper.WithPrefix(base), zookeeper.WithHooks(func(p string) { queued2 <- p }, nil, nil))
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	res2 := make(chan error, 1)
	go func() {
		_, err := e2.Acquire(ctx2, hold(key))
		res2 <- err
	}()
	node2 := <-queued2

	watching3 := make(chan string, 4)
	e3 := dial(t, addr, zookeeper.WithPrefix(base), zookeeper.WithHooks(nil, func(p string) { watching3 <- p }, nil))
	var w1Out atomic.Bool
	res3 := make(chan queuedResult, 1)
	go func() {
		l, err := e3.Acquire(bounded(t, time.Minute), hold(key))
		res3 <- queuedResult{l, err, w1Out.Load()}
	}()
	if got := <-watching3; got != node2 {
		t.Fatalf("W3 watches %s, want W2's node %s", got, node2)
	}

	cancel2()
	if err := <-res2; !errors.Is(err, engine.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("W2 after cancel: %v", err)
	}
	select {
	case r := <-res3:
		t.Fatalf("W3 was granted when W2 left, while W1 still holds (err %v)", r.err)
	case <-watching3: // W3 looked again and now watches W1
	case <-time.After(30 * time.Second):
		t.Fatalf("W3 neither re-watched nor was granted after W2 left")
	}
	w1Out.Store(true)
	if err := w1.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	w3 := granted(t, res3, "W3 after W1")
	if err := w3.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
}

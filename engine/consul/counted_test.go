package consul_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// counted is a waiting request for one of limit permits of key.
func counted(key string, limit int, value string) engine.Request {
	r := hold(key, engine.Shared)
	r.Limit, r.Value = limit, value
	return r
}

// mustHold fails unless Holders of key lists exactly want (mode, token and
// value), in order.
func mustHold(t *testing.T, e *consul.Engine, key string, want ...engine.Holder) {
	t.Helper()
	hs, err := e.Holders(ctxFor(t, 5*time.Second), key)
	if err != nil {
		t.Fatalf("Holders: %v", err)
	}
	if len(hs) != len(want) {
		t.Fatalf("Holders = %+v, want %+v", hs, want)
	}
	for i := range hs {
		if hs[i] != want[i] {
			t.Fatalf("Holders = %+v, want %+v", hs, want)
		}
	}
}

// TestCountedDeadHolder: a permit whose holder's session is invalidated is
// not listed by Holders, is not given to anyone during the holder's
// lock-delay, and is given after it; Watch tells of the invalidation and
// closes its channel when its context ends.
func TestCountedDeadHolder(t *testing.T) {
	const delay = 3 * time.Second
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	a := newEngine(t, addr, consul.WithLockDelay(delay))
	b := newEngine(t, addr, consul.WithLockDelay(0))
	key := testKey(t)
	la := mustAcquire(t, a, counted(key, 2, "a"))
	lb := mustAcquire(t, b, counted(key, 2, "b"))
	full := counted(key, 2, "c")
	full.Wait = false
	if l, err := b.Acquire(ctxFor(t, 5*time.Second), full); !errors.Is(err, engine.ErrNotAcquired) {
		if l != nil {
			_ = l.Release(context.Background())
		}
		t.Fatalf("a third permit of 2: %v, want ErrNotAcquired", err)
	}
	mustHold(t, b, key, engine.Holder{Mode: engine.Shared, Token: la.Token(), Value: "a"},
		engine.Holder{Mode: engine.Shared, Token: lb.Token(), Value: "b"})

	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, err := b.Watch(wctx, key)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	destroyed := time.Now()
	destroySession(t, outside, a.SessionID())
	waitDone(t, la, sessionTTL/2, "session destroyed")
	select {
	case <-changes:
	case <-time.After(5 * time.Second):
		t.Fatalf("Watch told nothing of the invalidation within 5s")
	}
	mustHold(t, b, key, engine.Holder{Mode: engine.Shared, Token: lb.Token(), Value: "b"})

	// Inside a's lock-delay its permit is not given (checks that start
	// late fail loudly rather than pass for the wrong reason).
	if l, err := b.Acquire(ctxFor(t, 5*time.Second), full); !errors.Is(err, engine.ErrNotAcquired) {
		if l != nil {
			_ = l.Release(context.Background())
		}
		t.Fatalf("a permit inside the dead holder's lock-delay: %v, want ErrNotAcquired", err)
	}
	if since := time.Since(destroyed); since > delay/2 {
		t.Fatalf("the checks took %v; they need to run within %v of the invalidation", since, delay/2)
	}
	lc := mustAcquire(t, b, counted(key, 2, "c"))
	if since := time.Since(destroyed); since < delay-500*time.Millisecond {
		t.Errorf("the dead holder's permit was given %v after the invalidation, inside its %v lock-delay", since, delay)
	}
	if lc.Token() <= lb.Token() {
		t.Errorf("token %d of the new permit is not above %d", lc.Token(), lb.Token())
	}
	mustHold(t, b, key, engine.Holder{Mode: engine.Shared, Token: lb.Token(), Value: "b"},
		engine.Holder{Mode: engine.Shared, Token: lc.Token(), Value: "c"})

	cancel()
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-changes:
		case <-deadline:
			t.Fatalf("the Watch channel was not closed within 5s of its context's end")
		}
	}
	for _, l := range []engine.Lease{lb, lc} {
		if err := l.Release(ctxFor(t, 5*time.Second)); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	mustBeClean(t, outside, b, key)
}

// TestCountedArrivalOrder: in the default mode, counted waiters that have
// raced past the starvation threshold queue like writers and get the
// permit in arrival order, and a counted TryLock does not take it from
// them. Each waiter starts once the one before it shows in the queue.
func TestCountedArrivalOrder(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	holderEng := newEngine(t, addr)
	key := testKey(t)
	holder := mustAcquire(t, holderEng, counted(key, 1, "holder"))
	queued := func(n int) bool {
		keys, _, err := outside.KV().Keys(holderEng.KeyDir(key)+"w-", "", nil)
		return err == nil && len(keys) >= n
	}
	type grant struct {
		i   int
		err error
	}
	const waiters = 4
	grants := make(chan grant, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		e := newEngine(t, addr, consul.WithRecheck(50*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := e.Acquire(ctx, counted(key, 1, ""))
			grants <- grant{i, err}
			if err == nil {
				_ = l.Release(context.Background())
			}
		}()
		waitUntil(t, fmt.Sprintf("counted waiter %d to queue", i), func() bool { return queued(i + 1) })
	}
	if err := holder.Release(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	late := counted(key, 1, "")
	late.Wait = false
	if l, err := holderEng.Acquire(ctxFor(t, 5*time.Second), late); err == nil {
		_ = l.Release(context.Background())
		if queued(1) {
			t.Errorf("a counted TryLock jumped the queue of %q", key)
		}
	}
	var order []int
	for range waiters {
		select {
		case g := <-grants:
			if g.err != nil {
				t.Fatalf("waiter %d: %v", g.i, g.err)
			}
			order = append(order, g.i)
		case <-time.After(30 * time.Second):
			t.Fatalf("waiters granted so far: %v", order)
		}
	}
	if !slices.Equal(order, []int{0, 1, 2, 3}) {
		t.Errorf("grant order %v, want arrival order [0 1 2 3]", order)
	}
	wg.Wait() // the releases
	mustBeClean(t, outside, holderEng, key)
}

// TestWatchEndsAtClose: a Watch whose context never ends has its channel
// closed by the engine's Close; after Close, Holders and Watch return
// ErrClosed; an invalid key is refused first.
func TestWatchEndsAtClose(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	e := newEngine(t, addr)
	key := testKey(t)
	if _, err := e.Watch(context.Background(), ""); !errors.Is(err, engine.ErrInvalidKey) {
		t.Errorf("Watch of an empty key: %v, want ErrInvalidKey", err)
	}
	changes, err := e.Watch(context.Background(), key)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Close did not return within 10s with a Watch open")
	}
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-changes:
		case <-deadline:
			t.Fatalf("the Watch channel was not closed by Close")
		}
	}
	if _, err := e.Holders(context.Background(), key); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Holders after Close: %v, want ErrClosed", err)
	}
	if _, err := e.Watch(context.Background(), key); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Watch after Close: %v, want ErrClosed", err)
	}
}

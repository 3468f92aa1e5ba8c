package consul_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestFairOrder: in fair mode, waiters are granted in the order they
// queued, writers and readers alike, and a single attempt does not jump
// the queue. Each waiter is started only once the one before it shows in
// the queue, so the arrival order is known without sleeping.
func TestFairOrder(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	holderEng := newEngine(t, addr, consul.WithFair(true))
	key := testKey(t)
	holder := mustAcquire(t, holderEng, try(key, engine.Exclusive))
	modes := []engine.Mode{engine.Exclusive, engine.Exclusive, engine.Shared, engine.Exclusive, engine.Exclusive}
	type grant struct {
		i   int
		err error
	}
	grants := make(chan grant, len(modes))
	queued := func(n int) bool {
		keys, _, err := outside.KV().Keys(holderEng.KeyDir(key)+"w-", "", nil)
		return err == nil && len(keys) >= n
	}
	for i, mode := range modes {
		e := newEngine(t, addr, consul.WithFair(true))
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := e.Acquire(ctx, hold(key, mode))
			grants <- grant{i, err}
			if err == nil {
				_ = l.Release(context.Background())
			}
		}()
		waitUntil(t, fmt.Sprintf("waiter %d to queue", i), func() bool { return queued(i + 1) })
	}
	late := newEngine(t, addr, consul.WithFair(true))
	if err := holder.Release(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Right after the release the first waiter's turn comes; a single
	// attempt must not take the key from the queue.
	if l, err := late.Acquire(ctxFor(t, 5*time.Second), try(key, engine.Exclusive)); err == nil {
		_ = l.Release(context.Background())
		// Granted only if every waiter already went; not with five queued.
		if queued(1) {
			t.Errorf("a TryLock jumped the queue of %q", key)
		}
	}
	var order []int
	for range modes {
		select {
		case g := <-grants:
			if g.err != nil {
				t.Fatalf("waiter %d: %v", g.i, g.err)
			}
			order = append(order, g.i)
		case <-time.After(40 * time.Second):
			t.Fatalf("waiters granted so far: %v", order)
		}
	}
	if !slices.Equal(order, []int{0, 1, 2, 3, 4}) {
		t.Errorf("grant order %v, want arrival order [0 1 2 3 4]", order)
	}
	// The last release leaves nothing behind but the fencing counter.
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, _, err := outside.KV().Keys(holderEng.KeyDir(key), "", nil)
		keys = slices.DeleteFunc(keys, func(k string) bool { return k == holderEng.KeyDir(key)+"fence" })
		if err == nil && len(keys) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: the agent still keeps %s", key, strings.Join(keys, ", "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFairQueueRespected: a queued waiter (here one planted from outside,
// which never takes its turn) keeps fair requests out even while the key is
// free: writers behind any waiter, readers behind a writer. Once it leaves
// the queue, a waiting writer gets in. A default-mode writer's TryLock
// fails too once a queued waiter has written the queue marker.
func TestFairQueueRespected(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	fair := newEngine(t, addr, consul.WithFair(true), consul.WithRecheck(100*time.Millisecond))
	plain := newEngine(t, addr)
	sid, _, err := outside.Session().Create(&api.SessionEntry{TTL: "30s", LockDelay: time.Millisecond, Behavior: api.SessionBehaviorDelete}, nil)
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	t.Cleanup(func() { _, _ = outside.Session().Destroy(sid, nil) })
	plant := func(key, name string) {
		t.Helper()
		ok, _, err := outside.KV().Acquire(&api.KVPair{Key: fair.KeyDir(key) + name, Session: sid}, nil)
		if err != nil || !ok {
			t.Fatalf("plant waiter %s: %v %v", name, ok, err)
		}
	}

	kx, ks := testKey(t), testKey(t)
	plant(kx, "w-x-planted")
	plant(ks, "w-s-planted")
	for _, c := range []struct {
		key  string
		mode engine.Mode
		ok   bool
	}{
		{kx, engine.Exclusive, false}, {kx, engine.Shared, false},
		{ks, engine.Exclusive, false}, {ks, engine.Shared, true},
	} {
		l, err := fair.Acquire(ctxFor(t, 5*time.Second), try(c.key, c.mode))
		if c.ok != (err == nil) {
			t.Errorf("fair %v TryLock on %q behind a queued waiter: got %v, want granted=%v", c.mode, c.key, err, c.ok)
		}
		if err == nil {
			_ = l.Release(context.Background())
		} else if !errors.Is(err, engine.ErrNotAcquired) {
			t.Errorf("fair TryLock behind a waiter: want ErrNotAcquired, got %v", err)
		}
	}
	// A waiting writer does not pass the planted waiter while it queues
	// (it re-checks every 100ms meanwhile).
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	l, err := fair.Acquire(ctx, hold(kx, engine.Exclusive))
	cancel()
	if err == nil {
		_ = l.Release(context.Background())
		t.Errorf("a fair writer overtook the queued waiter")
	} else if !errors.Is(err, engine.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("fair writer behind a waiter: want ErrNotAcquired and DeadlineExceeded, got %v", err)
	}
	// The fair writer queued (and wrote the marker) before it gave up; the
	// planted waiter still queues, so the marker stays and a default-mode
	// writer does not overtake it either.
	if l, err := plain.Acquire(ctxFor(t, 5*time.Second), try(kx, engine.Exclusive)); err == nil {
		_ = l.Release(context.Background())
		t.Errorf("a default-mode TryLock overtook a queued waiter")
	} else if !errors.Is(err, engine.ErrNotAcquired) {
		t.Errorf("default-mode TryLock behind a waiter: want ErrNotAcquired, got %v", err)
	}
	// When the planted waiter's session ends, its key goes and a waiting
	// writer gets in.
	got := make(chan error, 1)
	go func() {
		l, err := fair.Acquire(ctxFor(t, 20*time.Second), hold(kx, engine.Exclusive))
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	if _, err := outside.Session().Destroy(sid, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("waiter after the queue emptied: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("waiter not granted after the queue emptied")
	}
	for _, k := range []string{kx, ks} {
		mustBeClean(t, outside, fair, k)
	}
}

// waitedAcquire starts a waiting exclusive Acquire on e and returns where
// its outcome arrives; the lease is released as soon as it is granted.
func waitedAcquire(t *testing.T, e *consul.Engine, key string) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := e.Acquire(ctxFor(t, 30*time.Second), hold(key, engine.Exclusive))
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	return got
}

// hasKey reports whether the agent stores key.
func hasKey(t *testing.T, c *api.Client, key string) bool {
	t.Helper()
	p, _, err := c.KV().Get(key, nil)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return p != nil
}

// TestStarvingWriterQueues: in the default mode, a writer that has waited
// past the starvation threshold joins the key's queue and writes the
// queue marker (which every writer's first attempt checks is absent); when
// it is granted as the last waiter, the marker goes with its waiter key.
// With the threshold off, a writer never queues however long it waits.
func TestStarvingWriterQueues(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	for _, c := range []struct {
		name   string
		starve time.Duration
	}{{"on", 20 * time.Millisecond}, {"off", 0}} {
		t.Run(c.name, func(t *testing.T) {
			holderEng := newEngine(t, addr)
			key := testKey(t)
			marker := holderEng.KeyDir(key) + "queue"
			holder := mustAcquire(t, holderEng, try(key, engine.Exclusive))
			waiter := newEngine(t, addr, consul.WithStarvation(c.starve), consul.WithRecheck(50*time.Millisecond))
			got := waitedAcquire(t, waiter, key)
			if c.starve > 0 {
				waitUntil(t, "the starving writer to queue", func() bool { return hasKey(t, outside, marker) })
			} else {
				time.Sleep(300 * time.Millisecond) // six wait times: the writer retried, well past any threshold
				if hasKey(t, outside, marker) {
					t.Fatal("a writer queued with the starvation threshold off")
				}
			}
			if err := holder.Release(ctxFor(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the waiting writer was not granted after the release")
			}
			mustBeClean(t, outside, holderEng, key)
		})
	}
}

// TestStaleQueueMarker: a queue marker whose waiters are all gone (here
// one written from outside, with no waiter key) does not lock writers
// out: the first writer to meet it clears it, and the key ends clean.
func TestStaleQueueMarker(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	e := newEngine(t, addr)
	key := testKey(t)
	if _, err := outside.KV().Put(&api.KVPair{Key: e.KeyDir(key) + "queue"}, nil); err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, e, try(key, engine.Exclusive))
	if err := l.Release(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	mustBeClean(t, outside, e, key)
}

// waitUntil polls cond every 5ms for up to 20s: polling a state, not
// ordering events.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQueueSlotsBound: an engine queues at most half of WithMaxConns
// writers at once (here one), since each queued writer holds a blocking
// query; a starving writer that finds no slot keeps waiting without
// queueing, and still gets the key once the queued one is done.
func TestQueueSlotsBound(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	holderEng := newEngine(t, addr)
	key := testKey(t)
	holder := mustAcquire(t, holderEng, try(key, engine.Exclusive))
	e := newEngine(t, addr, consul.WithMaxConns(2), consul.WithStarvation(10*time.Millisecond), consul.WithRecheck(50*time.Millisecond))
	first, second := waitedAcquire(t, e, key), waitedAcquire(t, e, key)
	waiterKeys := func() int {
		keys, _, err := outside.KV().Keys(holderEng.KeyDir(key)+"w-", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}
	waitUntil(t, "a starving writer to queue", func() bool { return waiterKeys() == 1 })
	time.Sleep(200 * time.Millisecond) // four wait times: the other writer starved too
	if n := waiterKeys(); n != 1 {
		t.Fatalf("%d writers of one engine queued with one queue slot", n)
	}
	if err := holder.Release(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for i, got := range []<-chan error{first, second} {
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("writer %d: %v", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("writer %d was not granted after the release", i)
		}
	}
	mustBeClean(t, outside, holderEng, key)
}

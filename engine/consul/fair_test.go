package consul_test

import (
	"context"
	"errors"
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
		deadline := time.Now().Add(20 * time.Second)
		for !queued(i + 1) {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d did not queue within 20s", i)
			}
			time.Sleep(5 * time.Millisecond) // polling the queue, not ordering events
		}
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
	// The last release leaves nothing behind.
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, _, err := outside.KV().Keys(holderEng.KeyDir(key), "", nil)
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
// the queue, a waiting writer gets in. A default-mode engine ignores the
// queue, as documented.
func TestFairQueueRespected(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	fair := newEngine(t, addr, consul.WithFair(true), consul.WithWaitTime(100*time.Millisecond))
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
	// The default mode does not queue.
	l = mustAcquire(t, plain, try(kx, engine.Exclusive))
	if err := l.Release(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
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

package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// waitFor polls the server until cond holds, failing after a bound. It
// orders the test by the server's state instead of by sleeping.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
}

// TestFairOrder: in fair mode, writers are granted in arrival order.
func TestFairOrder(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	key := uniqueKey(t)
	holder := mustEngine(t, newClient(t, addr), WithFair(true))
	keys := holder.keysOf(key)
	first, err := holder.Acquire(ctxT(t), hold(key, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	order := make(chan int, n)
	errs := make(chan error, n)
	for i := range n {
		e := mustEngine(t, newClient(t, addr), WithFair(true))
		go func() {
			l, err := e.Acquire(ctxT(t), hold(key, 5*time.Second))
			if err != nil {
				errs <- err
				return
			}
			order <- i
			errs <- l.Release(context.Background())
		}()
		waitFor(t, fmt.Sprintf("waiter %d to queue", i), func() bool {
			return admin.LLen(context.Background(), keys.q).Val() == int64(i+1)
		})
	}
	if err := first.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if got := <-order; got != i {
			t.Fatalf("grant %d went to waiter %d: fair mode must follow arrival order", i, got)
		}
	}
}

// TestFairDeadWaiterDropped: a queued waiter that stops refreshing its place
// (its process died) is passed over after the queue TTL.
func TestFairDeadWaiterDropped(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	ctx := ctxT(t)
	key := uniqueKey(t)
	e := mustEngine(t, newClient(t, addr), WithFair(true), WithQueueTTL(300*time.Millisecond), WithRecheck(50*time.Millisecond))
	keys := e.keysOf(key)
	now, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ghostDeadline := now.Add(400 * time.Millisecond).UnixMilli()
	admin.RPush(ctx, keys.q, "ghost")
	admin.ZAdd(ctx, keys.ww, goredisZ(float64(ghostDeadline), "ghost"))
	t.Cleanup(func() { admin.Del(context.Background(), keys.q, keys.ww) })

	try := hold(key, time.Second)
	try.Wait = false
	if _, err := e.Acquire(ctx, try); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("TryLock behind a live queued waiter: want ErrNotAcquired, got %v", err)
	}
	l, err := e.Acquire(ctx, hold(key, time.Second))
	if err != nil {
		t.Fatalf("Lock behind a dead waiter: %v", err)
	}
	if pos := admin.LPos(ctx, keys.q, "ghost", goredisLPos()).Val(); pos >= 0 && admin.Exists(ctx, keys.q).Val() == 1 {
		t.Fatalf("the dead waiter is still queued at %d", pos)
	}
	_ = l.Release(ctx)
}

// TestWritersNotStarvedByReaders: once a writer waits, new readers wait
// behind it, and the writer gets the key when the current readers leave.
func TestWritersNotStarvedByReaders(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	key := uniqueKey(t)
	r, w, late := mustEngine(t, newClient(t, addr)), mustEngine(t, newClient(t, addr)), mustEngine(t, newClient(t, addr))
	keys := r.keysOf(key)
	read := hold(key, 5*time.Second)
	read.Mode = engine.Shared
	r1, err := r.Acquire(ctxT(t), read)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := w.Acquire(ctxT(t), hold(key, 5*time.Second))
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	waitFor(t, "the writer to register as waiting", func() bool {
		return admin.ZCard(context.Background(), keys.ww).Val() == 1
	})
	tryRead := read
	tryRead.Wait = false
	if l, err := late.Acquire(ctxT(t), tryRead); !errors.Is(err, engine.ErrNotAcquired) {
		if l != nil {
			_ = l.Release(context.Background())
		}
		t.Fatalf("a new reader got in ahead of a waiting writer (err %v)", err)
	}
	if err := r1.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer was not granted after the readers left")
	}
}

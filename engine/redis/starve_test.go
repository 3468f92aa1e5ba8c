package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

func tryReq(key string) engine.Request {
	return engine.Request{Key: key, Mode: engine.Exclusive, TTL: 5 * time.Second, Renew: true}
}

// holdKey takes key on a new engine with opts and returns the engine, the
// key's Redis keys and the lease.
func holdKey(t *testing.T, addr, key string, opts ...Option) (*Engine, lockKeys, engine.Lease) {
	t.Helper()
	e := mustEngine(t, newClient(t, addr), opts...)
	l, err := e.Acquire(ctxT(t), hold(key, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return e, e.keysOf(key), l
}

type acquired struct {
	l   engine.Lease
	err error
}

// acquireAsync starts a waiting Acquire on e and returns where its outcome
// arrives.
func acquireAsync(t *testing.T, e *Engine, key string) <-chan acquired {
	got := make(chan acquired, 1)
	go func() {
		l, err := e.Acquire(ctxT(t), hold(key, 5*time.Second))
		got <- acquired{l, err}
	}()
	return got
}

// TestStarvingWaiterGoesFirst: in the default mode, a writer that has
// waited past the starvation threshold joins the queue; from then on a
// releaser that locks again at once, and waiters that arrive later, do not
// get the key ahead of it, and the later waiters queue behind it. With the
// threshold off, no waiter ever queues.
func TestStarvingWaiterGoesFirst(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	bg := context.Background()

	t.Run("starvation on", func(t *testing.T) {
		key := uniqueKey(t)
		opts := []Option{WithStarvation(20 * time.Millisecond), WithRecheck(10 * time.Millisecond)}
		holder, keys, first := holdKey(t, addr, key, opts...)
		starving := acquireAsync(t, mustEngine(t, newClient(t, addr), opts...), key)
		waitFor(t, "the waiter to join the queue", func() bool {
			return admin.LLen(bg, keys.q).Val() == 1
		})
		// A later waiter finds the queue and joins it at once, behind the
		// starving one, whatever its own wait.
		late := acquireAsync(t, mustEngine(t, newClient(t, addr), WithStarvation(time.Hour)), key)
		waitFor(t, "the later waiter to queue behind", func() bool {
			return admin.LLen(bg, keys.q).Val() == 2
		})
		if err := first.Release(bg); err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Acquire(ctxT(t), tryReq(key)); !errors.Is(err, engine.ErrNotAcquired) {
			t.Fatalf("the releaser took the key back ahead of a starving waiter: err = %v", err)
		}
		r := <-starving
		if r.err != nil {
			t.Fatal(r.err)
		}
		select {
		case r := <-late:
			t.Fatalf("the later waiter got the key while the starving one held it (err %v)", r.err)
		default:
		}
		if err := r.l.Release(bg); err != nil {
			t.Fatal(err)
		}
		r = <-late
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := r.l.Release(bg); err != nil {
			t.Fatal(err)
		}
		if n := admin.Exists(bg, keys.stateKeys()...).Val(); n != 0 {
			t.Errorf("%d state keys left after the queue drained", n)
		}
	})

	t.Run("starvation off", func(t *testing.T) {
		key := uniqueKey(t)
		opts := []Option{WithStarvation(0), WithRecheck(10 * time.Millisecond)}
		_, keys, first := holdKey(t, addr, key, opts...)
		waiter := acquireAsync(t, mustEngine(t, newClient(t, addr), opts...), key)
		waitFor(t, "the waiter to register", func() bool {
			return admin.ZCard(bg, keys.ww).Val() == 1
		})
		time.Sleep(50 * time.Millisecond) // well past any threshold: it must not matter here
		if admin.Exists(bg, keys.q).Val() != 0 {
			t.Fatal("a waiter queued with the starvation threshold off")
		}
		if err := first.Release(bg); err != nil {
			t.Fatal(err)
		}
		r := <-waiter
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = r.l.Release(bg)
	})
}

// TestReleaseWakesOneEngine: a release that hands the key to a waiting
// writer publishes once, on that writer's engine's wake channel, naming its
// lease; nothing goes to the key's channel, which every waiting engine
// would receive.
func TestReleaseWakesOneEngine(t *testing.T) {
	addr := testenv.RedisAddr(t)
	key := uniqueKey(t)
	prefix := "cerberus-wake-test:"
	holder := mustEngine(t, newClient(t, addr), WithPrefix(prefix))
	waiterEng := mustEngine(t, newClient(t, addr), WithPrefix(prefix))
	keys := holder.keysOf(key)
	watch := newClient(t, addr).PSubscribe(ctxT(t), prefix+"*")
	t.Cleanup(func() { _ = watch.Close() })
	if _, err := watch.Receive(ctxT(t)); err != nil { // the psubscribe confirmation
		t.Fatal(err)
	}
	admin := newClient(t, addr)
	first, err := holder.Acquire(ctxT(t), hold(key, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, waiterEng, key)
	waitFor(t, "the waiter to register", func() bool {
		return admin.ZCard(context.Background(), keys.ww).Val() == 1
	})
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() { _ = r.l.Release(context.Background()) }()
	msg, err := watch.ReceiveMessage(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := prefix + "wake:" + waiterEng.id
	if msg.Channel != want || !strings.HasPrefix(msg.Payload, waiterEng.id+":") {
		t.Fatalf("release published %q on %q; want the waiter's lease id on %q", msg.Payload, msg.Channel, want)
	}
	// The waiter's grant and the check below publish nothing, so a second
	// message, if any, came from the release.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if extra, err := watch.ReceiveMessage(ctx); err == nil {
		t.Fatalf("release published a second message %q on %q", extra.Payload, extra.Channel)
	}
}

// TestQueueTakesInSleepingWaiters: a writer already asleep outside the
// queue when another starts it (by starving) is brought into the queue, so
// a release wakes it in its turn. Left outside, it would sleep until its
// recheck (a minute here) while later arrivals, who join the queue, go
// first.
func TestQueueTakesInSleepingWaiters(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	bg := context.Background()
	key := uniqueKey(t)
	sleepy := []Option{WithStarvation(time.Hour), WithQueueTTL(3 * time.Minute), WithRecheck(time.Minute)}
	_, keys, first := holdKey(t, addr, key)
	asleep := acquireAsync(t, mustEngine(t, newClient(t, addr), sleepy...), key)
	waitFor(t, "the sleeping waiter to register", func() bool {
		return admin.ZCard(bg, keys.ww).Val() == 1
	})
	starving := acquireAsync(t, mustEngine(t, newClient(t, addr), WithStarvation(20*time.Millisecond), WithRecheck(10*time.Millisecond)), key)
	waitFor(t, "the starving waiter to start the queue", func() bool {
		return admin.Exists(bg, keys.q).Val() == 1
	})
	late := acquireAsync(t, mustEngine(t, newClient(t, addr), sleepy...), key)
	waitFor(t, "the later waiter to register", func() bool {
		return admin.ZCard(bg, keys.ww).Val() == 3
	})
	if err := first.Release(bg); err != nil {
		t.Fatal(err)
	}
	r := <-starving
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.l.Release(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case r = <-asleep:
		if r.err != nil {
			t.Fatal(r.err)
		}
	case r = <-late:
		t.Fatalf("a later arrival got the key ahead of a writer that was already waiting (err %v)", r.err)
	case <-time.After(5 * time.Second):
		t.Fatal("the writer that was waiting before the queue started was not woken by the release")
	}
	if err := r.l.Release(bg); err != nil {
		t.Fatal(err)
	}
	if r = <-late; r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.l.Release(bg); err != nil {
		t.Fatal(err)
	}
}

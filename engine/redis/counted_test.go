package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// permit is a waiting, renewed request for one of limit permits of key.
func permit(key string, limit int, value string) engine.Request {
	return engine.Request{Key: key, Mode: engine.Shared, TTL: 5 * time.Second, Renew: true, Wait: true,
		Limit: limit, Value: value}
}

// TestSemaphoreFairUnderContention: 16 engines, each on its own client,
// take one of 3 permits of a key over and over, holding each 3ms, then
// releasing and asking again at once. Never more than 3 hold at once, and
// since counted waiters queue in arrival order (and a releaser that asks
// again at once queues behind them), every client gets about as many
// grants as any other: the fewest at least 0.8 of the most, of the first
// 16 x 40 grants. (Waiters served in no order give 0.45-0.62.) The hold is
// long against the moments a loaded host leaves a client's goroutine
// unscheduled: a client that has not asked again yet is in no queue, and
// with 0.5ms holds the clients that were running took its turns.
func TestSemaphoreFairUnderContention(t *testing.T) {
	addr := testenv.RedisAddr(t)
	key := uniqueKey(t)
	const clients, limit = 16, 3
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	var inside, over, total atomic.Int64
	target := int64(clients * rounds)
	counts := make([]int, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := make(chan struct{})
	for i := range clients {
		e := mustEngine(t, newClient(t, addr))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			deadline := time.Now().Add(20 * time.Second)
			for range rounds * 4 { // bounded; the shared target ends it sooner
				if total.Load() >= target || time.Now().After(deadline) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				l, err := e.Acquire(ctx, permit(key, limit, fmt.Sprint(i)))
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) > limit {
					over.Add(1)
				}
				time.Sleep(3 * time.Millisecond)
				inside.Add(-1)
				if total.Add(1) <= target { // the waiters still queued at the end do not count
					counts[i]++
				}
				if err := l.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := over.Load(); n > 0 {
		t.Fatalf("%d grants found %d permits held already", n, limit)
	}
	lo, hi := slices.Min(counts), slices.Max(counts)
	t.Logf("grants per client: %v (min/max %.2f)", counts, float64(lo)/float64(hi))
	if float64(lo) < 0.8*float64(hi) {
		t.Errorf("grants per client %v: the fewest (%d) is under 0.8 of the most (%d)", counts, lo, hi)
	}
}

// TestCountedWaiterCancelLeavesNothing: a counted waiter whose context
// ends leaves the reader set and the counted queue, and once the holders
// release nothing of the key is left on the server; a later waiter behind
// it is served at once when a permit frees.
func TestCountedWaiterCancelLeavesNothing(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	key := uniqueKey(t)
	e := mustEngine(t, newClient(t, addr))
	k := e.keysOf(key)
	bg := context.Background()
	var held []engine.Lease
	for i := range 2 {
		l, err := e.Acquire(ctxT(t), permit(key, 2, fmt.Sprint("h", i)))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	ctx, cancel := context.WithCancel(bg)
	gone := make(chan error, 1)
	quitter := mustEngine(t, newClient(t, addr))
	go func() {
		_, err := quitter.Acquire(ctx, permit(key, 2, "cancelled"))
		gone <- err
	}()
	waitFor(t, "the first waiter to queue", func() bool { return admin.LLen(bg, k.cq).Val() == 1 })
	next := make(chan engine.Lease, 1)
	// A recheck far longer than the wait below: only the release's
	// message can wake it in time.
	slow := mustEngine(t, newClient(t, addr), WithQueueTTL(60*time.Second), WithRecheck(20*time.Second))
	go func() {
		l, err := slow.Acquire(ctxT(t), permit(key, 2, "next"))
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	waitFor(t, "the second waiter to queue", func() bool { return admin.LLen(bg, k.cq).Val() == 2 })
	cancel()
	if err := <-gone; !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("cancelled waiter: %v, want ErrNotAcquired", err)
	}
	waitFor(t, "the cancelled waiter to leave", func() bool { return admin.LLen(bg, k.cq).Val() == 1 })
	if n := admin.ZCard(bg, k.rw).Val(); n != 1 {
		t.Errorf("%d waiting readers registered, want 1", n)
	}
	if err := held[0].Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var l engine.Lease
	select {
	case l = <-next:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind a cancelled one was not served when a permit freed")
	}
	if l == nil {
		return
	}
	for _, x := range []engine.Lease{held[1], l} {
		if err := x.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := leftovers(admin, e)(bg, key); len(left) != 0 {
		t.Fatalf("left on the server: %v", left)
	}
}

// TestCountedExpiredHolderFrees: a permit whose holder stops renewing (a
// crashed process: here a fixed TTL that is never released) frees itself
// when its TTL runs out: Holders stops listing it, a waiter is granted
// without any release, and its :v entry is pruned.
func TestCountedExpiredHolderFrees(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	key := uniqueKey(t)
	e := mustEngine(t, newClient(t, addr))
	k := e.keysOf(key)
	crashed := permit(key, 1, "crashed")
	crashed.Renew, crashed.TTL = false, 300*time.Millisecond
	if _, err := e.Acquire(ctxT(t), crashed); err != nil {
		t.Fatal(err)
	}
	hs, err := e.Holders(ctxT(t), key)
	if err != nil || len(hs) != 1 || hs[0].Value != "crashed" || hs[0].Mode != engine.Shared {
		t.Fatalf("Holders = %+v, %v; want the crashed holder", hs, err)
	}
	start := time.Now()
	w := mustEngine(t, newClient(t, addr))
	l, err := w.Acquire(ctxT(t), permit(key, 1, "next"))
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("granted after %v, while the expired holder had about 300ms left", waited)
	}
	hs, err = e.Holders(ctxT(t), key)
	if err != nil || len(hs) != 1 || hs[0].Value != "next" || hs[0].Token != l.Token() {
		t.Fatalf("Holders = %+v, %v; want only the new holder (token %d)", hs, err, l.Token())
	}
	if n := admin.HLen(context.Background(), k.v).Val(); n != 1 {
		t.Errorf(":v keeps %d entries, want the live holder's alone", n)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if left, _ := leftovers(admin, e)(context.Background(), key); len(left) != 0 {
		t.Fatalf("left on the server: %v", left)
	}
}

// TestHoldersExclusiveValue: an exclusive holder's value is listed with
// its token, a writer handed the key on release is listed with its own
// value, and a holder without a value that follows an expired holder with
// one is listed with none.
func TestHoldersExclusiveValue(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	key := uniqueKey(t)
	a, b := mustEngine(t, newClient(t, addr)), mustEngine(t, newClient(t, addr))
	first := hold(key, 5*time.Second)
	first.Value = "alpha"
	la, err := a.Acquire(ctxT(t), first)
	if err != nil {
		t.Fatal(err)
	}
	mustHold := func(l engine.Lease, value string) {
		t.Helper()
		hs, err := b.Holders(ctxT(t), key)
		if err != nil || len(hs) != 1 || hs[0].Mode != engine.Exclusive || hs[0].Token != l.Token() || hs[0].Value != value {
			t.Fatalf("Holders = %+v, %v; want exclusive, token %d, value %q", hs, err, l.Token(), value)
		}
	}
	mustHold(la, "alpha")
	second := hold(key, 5*time.Second)
	second.Value = "beta gamma"
	got := make(chan engine.Lease, 1)
	go func() {
		l, err := b.Acquire(ctxT(t), second)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	k := a.keysOf(key)
	waitFor(t, "the writer to register", func() bool {
		return admin.HLen(context.Background(), k.h).Val() == 1
	})
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		return
	}
	mustHold(lb, "beta gamma")
	if err := lb.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	fixed := once(key, 200*time.Millisecond)
	fixed.Renew, fixed.Value = false, "short"
	if _, err := a.Acquire(ctxT(t), fixed); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the fixed lease to expire", func() bool { return admin.Exists(context.Background(), k.w).Val() == 0 })
	lc, err := b.Acquire(ctxT(t), once(key, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mustHold(lc, "")
	if err := lc.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if hs, err := b.Holders(ctxT(t), key); err != nil || len(hs) != 0 {
		t.Fatalf("Holders of a free key = %+v, %v", hs, err)
	}
	if left, _ := leftovers(admin, a)(context.Background(), key); len(left) != 0 {
		t.Fatalf("left on the server: %v", left)
	}
}

// TestWatchPublishesOnlyWhenWatched: grants and releases publish nothing
// on the key's channel while nobody watches it; once a Watch runs, its
// channel is told of a shared grant, a release and an exclusive grant,
// and it is closed when its context ends and, for another Watch, when the
// engine closes.
func TestWatchPublishesOnlyWhenWatched(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	key := uniqueKey(t)
	e := mustEngine(t, newClient(t, addr))
	k := e.keysOf(key)
	bg := context.Background()
	sub := admin.Subscribe(bg, k.c)
	defer sub.Close()
	if _, err := sub.Receive(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	msgs := sub.Channel()
	cycle := func(req engine.Request) {
		t.Helper()
		l, err := e.Acquire(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	cycle(once(key, time.Second))
	cycle(permit(key, 2, "p"))
	select {
	case m := <-msgs:
		t.Fatalf("published %q with nobody watching", m.Payload)
	case <-time.After(100 * time.Millisecond):
	}

	w := mustEngine(t, newClient(t, addr))
	ctx, cancel := context.WithCancel(bg)
	ch, err := w.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	expect := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("Watch told nothing of %s", what)
		}
	}
	l, err := e.Acquire(ctxT(t), permit(key, 2, "p"))
	if err != nil {
		t.Fatal(err)
	}
	expect("a shared grant")
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	expect("a shared release")
	l, err = e.Acquire(ctxT(t), once(key, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	expect("an exclusive grant")
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	expect("an exclusive release")
	if m := <-msgs; m.Payload != "w" {
		t.Errorf("published %q, want \"w\"", m.Payload)
	}
	cancel()
	for range ch { // bounded: closed when ctx ends
	}
	ch2, err := w.Watch(bg, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-ch2; open {
		if _, open := <-ch2; open {
			t.Fatal("Watch channel still open after Close")
		}
	}
	if _, err := w.Watch(bg, key); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
	if _, err := w.Holders(bg, key); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Holders after Close: %v, want ErrClosed", err)
	}
	if _, err := e.Watch(bg, ""); !errors.Is(err, engine.ErrInvalidKey) {
		t.Fatalf("Watch of an empty key: %v, want ErrInvalidKey", err)
	}
	_ = admin.Del(bg, k.wt)
}

// TestWatchToldAfterReconnect: when the engine's pub/sub connection
// breaks (here the server kills it), go-redis reconnects and subscribes
// again, and the Watch is told then, since a change may have been
// published meanwhile. Only this test's own connection is killed: its
// client has a name of its own.
func TestWatchToldAfterReconnect(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	key := uniqueKey(t)
	name := fmt.Sprintf("cerberus-watch-test-%d", time.Now().UnixNano())
	c := goredis.NewClient(&goredis.Options{Addr: addr, ClientName: name})
	t.Cleanup(func() { _ = c.Close() })
	e := mustEngine(t, c)
	ch, err := e.Watch(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("Watch told of a change before any")
	case <-time.After(100 * time.Millisecond):
	}
	killed := int64(0)
	for _, line := range strings.Split(admin.ClientList(ctxT(t)).Val(), "\n") {
		if !strings.Contains(line, " name="+name+" ") || !strings.Contains(line, " flags=P ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				killed += admin.ClientKillByFilter(ctxT(t), "ID", id).Val()
			}
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d pub/sub connections named %s, want 1", killed, name)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch told nothing after its pub/sub connection was killed and restored")
	}
	_ = admin.Del(context.Background(), e.keysOf(key).wt)
}

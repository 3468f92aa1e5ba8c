package cerberus_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
)

// counting wraps a real engine and counts Acquire calls, to show which
// calls reach the engine and which are served by reentrancy.
type counting struct {
	engine.Engine
	acquires atomic.Int64
}

func (c *counting) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	c.acquires.Add(1)
	return c.Engine.Acquire(ctx, req)
}

// newClients returns two clients over one memory store, as two processes
// over one server, and the counter of the first.
func newClients(t *testing.T, opts ...cerberus.Option) (*cerberus.Client, *cerberus.Client, *counting) {
	t.Helper()
	store := memory.NewStore()
	eng := &counting{Engine: memory.New(memory.WithStore(store))}
	a, err := cerberus.New(eng, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cerberus.New(memory.New(memory.WithStore(store)), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b, eng
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// must returns a function that unwraps a Lock result or fails the test.
func must(t *testing.T) func(*cerberus.Lease, error) *cerberus.Lease {
	return func(l *cerberus.Lease, err error) *cerberus.Lease {
		t.Helper()
		if err != nil {
			t.Fatalf("lock: %v", err)
		}
		return l
	}
}

func heldElsewhere(t *testing.T, c *cerberus.Client, key string) {
	t.Helper()
	l, err := c.TryLock(ctxT(t), key)
	if err == nil {
		_ = l.Unlock(context.Background())
		t.Fatalf("%q should be held, but another client took it", key)
	}
	if !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatalf("TryLock %q: want ErrNotAcquired, got %v", key, err)
	}
}

func freeElsewhere(t *testing.T, c *cerberus.Client, key string) {
	t.Helper()
	l, err := c.TryLock(ctxT(t), key)
	if err != nil {
		t.Fatalf("%q should be free: %v", key, err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestReentrancyCountsWithoutEngineCalls(t *testing.T) {
	a, b, eng := newClients(t)
	ctx := cerberus.WithOwner(ctxT(t))
	outer := must(t)(a.Lock(ctx, "k"))
	inner := must(t)(a.Lock(ctx, "k"))
	innerShared := must(t)(a.RLock(ctx, "k"))
	if n := eng.acquires.Load(); n != 1 {
		t.Fatalf("engine saw %d acquires for one outer and two nested locks, want 1", n)
	}
	if inner.Token() != outer.Token() || innerShared.Token() != outer.Token() {
		t.Fatalf("nested tokens %d, %d differ from outer %d", inner.Token(), innerShared.Token(), outer.Token())
	}
	if inner.Done() != outer.Done() {
		t.Fatalf("nested lease has its own Done channel")
	}
	for _, l := range []*cerberus.Lease{innerShared, inner} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		heldElsewhere(t, b, "k")
	}
	if err := inner.Unlock(ctx); !errors.Is(err, cerberus.ErrNotHeld) {
		t.Fatalf("second Unlock of one nested lease: want ErrNotHeld, got %v", err)
	}
	heldElsewhere(t, b, "k")
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(outer.Err(), cerberus.ErrReleased) {
		t.Fatalf("Err after the last Unlock = %v, want ErrReleased", outer.Err())
	}
	freeElsewhere(t, b, "k")
}

func TestWithoutOwnerLocksExclude(t *testing.T) {
	a, _, _ := newClients(t)
	ctx := ctxT(t)
	l := must(t)(a.Lock(ctx, "k"))
	// Same client, same goroutine, no owner: excluded like sync.Mutex.
	if _, err := a.TryLock(ctx, "k"); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatalf("second TryLock without owner: want ErrNotAcquired, got %v", err)
	}
	// Two different owners exclude each other too.
	o1, o2 := cerberus.WithOwner(ctx), cerberus.WithOwner(ctx)
	m := must(t)(a.Lock(o1, "m"))
	if _, err := a.TryLock(o2, "m"); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatalf("TryLock by another owner: want ErrNotAcquired, got %v", err)
	}
	_ = l.Unlock(ctx)
	_ = m.Unlock(ctx)
}

func TestUpgradeRefused(t *testing.T) {
	a, _, eng := newClients(t)
	ctx := cerberus.WithOwner(ctxT(t))
	r := must(t)(a.RLock(ctx, "k"))
	before := eng.acquires.Load()
	if _, err := a.Lock(ctx, "k"); !errors.Is(err, cerberus.ErrUpgrade) {
		t.Fatalf("Lock over own RLock: want ErrUpgrade, got %v", err)
	}
	if eng.acquires.Load() != before {
		t.Fatalf("a refused upgrade reached the engine")
	}
	_ = r.Unlock(ctx)
}

func TestConcurrentSameOwnerAcquiresOnce(t *testing.T) {
	a, b, eng := newClients(t)
	ctx := cerberus.WithOwner(ctxT(t))
	const n = 16
	leases := make([]*cerberus.Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leases[i], errs[i] = a.Lock(ctx, "k")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("goroutine %d: %v", i, err)
		}
		if leases[i].Token() != leases[0].Token() {
			t.Fatalf("goroutines of one owner got different tokens %d and %d", leases[i].Token(), leases[0].Token())
		}
	}
	if got := eng.acquires.Load(); got != 1 {
		t.Fatalf("%d goroutines of one owner made %d engine acquires, want 1", n, got)
	}
	for _, l := range leases[1:] {
		_ = l.Unlock(ctx)
	}
	heldElsewhere(t, b, "k")
	_ = leases[0].Unlock(ctx)
	freeElsewhere(t, b, "k")
}

func TestLostHoldIsTakenAfresh(t *testing.T) {
	a, _, eng := newClients(t)
	ctx := cerberus.WithOwner(ctxT(t))
	l := must(t)(a.Lock(ctx, "k", cerberus.WithTTL(50*time.Millisecond)))
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("fixed TTL lease did not end")
	}
	if !errors.Is(l.Err(), cerberus.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
	again := must(t)(a.Lock(ctx, "k"))
	if again.Token() <= l.Token() || eng.acquires.Load() != 2 {
		t.Fatalf("re-lock after loss: token %d (old %d), %d engine acquires; want a new grant", again.Token(), l.Token(), eng.acquires.Load())
	}
	if err := l.Unlock(ctx); !errors.Is(err, cerberus.ErrNotHeld) || !errors.Is(err, cerberus.ErrLeaseLost) {
		t.Fatalf("Unlock of a lost lease: want ErrNotHeld and ErrLeaseLost, got %v", err)
	}
	if again.Err() != nil {
		t.Fatalf("Unlock of the lost lease ended the new one: %v", again.Err())
	}
	_ = again.Unlock(ctx)
}

func TestLockWaitEndsWithContext(t *testing.T) {
	a, b, _ := newClients(t)
	l := must(t)(a.Lock(ctxT(t), "k"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := b.Lock(ctx, "k")
	if !errors.Is(err, cerberus.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrNotAcquired joined with DeadlineExceeded, got %v", err)
	}
	_ = l.Unlock(context.Background())
	freeElsewhere(t, b, "k")
}

func TestLockAllAllOrNone(t *testing.T) {
	a, b, eng := newClients(t)
	blocker := must(t)(b.Lock(ctxT(t), "b"))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := a.LockAll(ctx, []string{"c", "a", "b"}); !errors.Is(err, cerberus.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll with one key held: want ErrNotAcquired and DeadlineExceeded, got %v", err)
	}
	// "a" was taken before "b" blocked and must have been given back; "c"
	// comes after "b" in lock order and was never taken.
	freeElsewhere(t, b, "a")
	freeElsewhere(t, b, "c")
	if n := eng.acquires.Load(); n != 2 {
		t.Fatalf("engine saw %d acquires, want 2 (a, then b)", n)
	}
	_ = blocker.Unlock(context.Background())

	before := eng.acquires.Load()
	if _, err := a.LockAll(ctxT(t), []string{"x", ""}); !errors.Is(err, cerberus.ErrInvalidKey) {
		t.Fatalf("LockAll with an empty key: want ErrInvalidKey, got %v", err)
	}
	if eng.acquires.Load() != before {
		t.Fatalf("LockAll with an invalid key reached the engine")
	}
	freeElsewhere(t, b, "x")

	m := must(t)(a.LockAll(ctxT(t), []string{"z", "y", "z"}))
	if got := m.Keys(); len(got) != 2 || got[0] != "y" || got[1] != "z" {
		t.Fatalf("Keys() = %v, want [y z]", got)
	}
	heldElsewhere(t, b, "y")
	heldElsewhere(t, b, "z")
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-m.Done()
	freeElsewhere(t, b, "y")
	freeElsewhere(t, b, "z")
}

func TestLockAllOppositeOrdersDoNotDeadlock(t *testing.T) {
	a, b, _ := newClients(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	var fails atomic.Int64
	for i, c := range []*cerberus.Client{a, b} {
		keys := []string{"p", "q", "r"}
		if i == 1 {
			keys = []string{"r", "q", "p"}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				m, err := c.LockAll(ctx, keys)
				if err != nil {
					fails.Add(1)
					return
				}
				_ = m.Unlock(context.Background())
			}
		}()
	}
	wg.Wait()
	if fails.Load() != 0 {
		t.Fatalf("LockAll in opposite orders failed (deadlocked until the deadline)")
	}
}

func TestLockAllDoneWhenAPartIsLost(t *testing.T) {
	a, _, _ := newClients(t)
	m := must(t)(a.LockAll(ctxT(t), []string{"a", "b"}, cerberus.WithTTL(50*time.Millisecond)))
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("LockAll lease did not end when its parts expired")
	}
	if !errors.Is(m.Err(), cerberus.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", m.Err())
	}
}

func TestInvalidInputBeforeIO(t *testing.T) {
	a, _, eng := newClients(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		key  string
		opts []cerberus.Option
		want error
	}{
		{"", nil, cerberus.ErrInvalidKey},
		{"ok", []cerberus.Option{cerberus.WithTTL(0)}, cerberus.ErrInvalidTTL},
		{"ok", []cerberus.Option{cerberus.WithWatchdog(-time.Second)}, cerberus.ErrInvalidTTL},
	} {
		if _, err := a.Lock(ctx, tc.key, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("Lock(%q): want %v, got %v", tc.key, tc.want, err)
		}
	}
	if n := eng.acquires.Load(); n != 0 {
		t.Fatalf("invalid input reached the engine %d times", n)
	}
	if _, err := cerberus.New(memory.New(), cerberus.WithTTL(time.Nanosecond)); !errors.Is(err, cerberus.ErrInvalidTTL) {
		t.Fatalf("New with a bad default TTL: want ErrInvalidTTL, got %v", err)
	}
	if _, err := cerberus.New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

func TestCloseEndsLeases(t *testing.T) {
	a, b, _ := newClients(t)
	ctx := cerberus.WithOwner(ctxT(t))
	l := must(t)(a.Lock(ctx, "k"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if !errors.Is(l.Err(), cerberus.ErrClosed) {
		t.Fatalf("Err after Close = %v, want ErrClosed", l.Err())
	}
	freeElsewhere(t, b, "k")
	if _, err := a.Lock(ctx, "k"); !errors.Is(err, cerberus.ErrClosed) {
		t.Fatalf("Lock after Close: want ErrClosed, got %v", err)
	}
	if _, err := a.Lock(context.Background(), "k"); !errors.Is(err, cerberus.ErrClosed) {
		t.Fatalf("Lock without owner after Close: want ErrClosed, got %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestSharedLeases(t *testing.T) {
	a, b, _ := newClients(t)
	ctx := ctxT(t)
	r1 := must(t)(a.RLock(ctx, "k"))
	r2 := must(t)(b.TryRLock(ctx, "k"))
	if !r1.Shared() || !r2.Shared() {
		t.Fatal("RLock leases do not report Shared")
	}
	heldElsewhere(t, b, "k")
	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)
	freeElsewhere(t, b, "k")
}

// failingRelease wraps an engine whose first fails lease Releases fail
// as an unreachable server's would, the engine keeping the lease.
type failingRelease struct {
	engine.Engine
	fails atomic.Int32
}

func (f *failingRelease) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	l, err := f.Engine.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &failingLease{Lease: l, f: f}, nil
}

type failingLease struct {
	engine.Lease
	f *failingRelease
}

func (l *failingLease) Release(ctx context.Context) error {
	if l.f.fails.Add(-1) >= 0 {
		return &engine.OpError{Engine: "failing", Op: "release", Key: l.Key(), Err: engine.ErrUnavailable}
	}
	return l.Lease.Release(ctx)
}

// TestUnlockFailureIsRetried: an Unlock whose release the server does not
// answer returns the error, ends the lease with ErrLeaseLost (the holder
// has let go), and the release is retried in the background, so the key
// does not stay held by a lease the engine keeps renewing.
func TestUnlockFailureIsRetried(t *testing.T) {
	f := &failingRelease{Engine: memory.New()}
	f.fails.Store(2)
	c, err := cerberus.New(f)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l, err := c.Lock(ctx, "k") // the default watchdog: renewed until released
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Unlock with the server away: %v, want ErrUnavailable", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the lease's Done is open after its failed Unlock")
	}
	if !errors.Is(l.Err(), cerberus.ErrLeaseLost) {
		t.Errorf("Err after a failed Unlock: %v, want ErrLeaseLost", l.Err())
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatalf("TryLock right after the failed Unlock: %v; the engine still holds the key", err)
	}
	// The retries: the first fails too, the second frees the key.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	next, err := c.Lock(wctx, "k")
	if err != nil {
		t.Fatalf("the key was never freed after the failed Unlock: %v", err)
	}
	_ = next.Unlock(ctx)
}

package cerberus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/failover"
)

// Short periods for the hold-limit tests: the watchdog renews several
// times within the limit, and an end is expected within limitBound of it.
const (
	limitWatchdog = 50 * time.Millisecond
	holdLimit     = 300 * time.Millisecond
	limitBound    = 2 * time.Second
)

// releases wraps a real engine and, at every Release of one of its
// leases, records whether the root lease watched (if any) had ended.
type releases struct {
	engine.Engine
	watched  atomic.Pointer[cerberus.Lease]
	calls    atomic.Int64
	untold   atomic.Int64 // releases that came while watched was still open
	acquires atomic.Int64
}

func (r *releases) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	r.acquires.Add(1)
	l, err := r.Engine.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &releasing{Lease: l, r: r}, nil
}

type releasing struct {
	engine.Lease
	r *releases
}

func (l *releasing) Release(ctx context.Context) error {
	l.r.calls.Add(1)
	if w := l.r.watched.Load(); w != nil {
		select {
		case <-w.Done():
		default:
			l.r.untold.Add(1)
		}
	}
	return l.Lease.Release(ctx)
}

// limitClients returns a client over a releases-wrapped memory engine and
// a second client over the same store, as another process.
func limitClients(t *testing.T) (*cerberus.Client, *cerberus.Client, *releases) {
	t.Helper()
	store := memory.NewStore()
	eng := &releases{Engine: memory.New(memory.WithStore(store))}
	a, err := cerberus.New(eng)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cerberus.New(memory.New(memory.WithStore(store)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b, eng
}

// waitEnd waits for l to end within d and returns when it did.
func waitEnd(t *testing.T, l *cerberus.Lease, d time.Duration) time.Time {
	t.Helper()
	select {
	case <-l.Done():
		return time.Now()
	case <-time.After(d):
		t.Fatalf("lease of %q still held after %v", l.Key(), d)
		return time.Time{}
	}
}

// TestHoldLimitEndsRenewedLease: a watchdog lease renewed every few tens
// of milliseconds ends at its hold limit; the holder is told (Done,
// ErrHoldLimit) before its engine releases the key, and a waiter in
// another process is granted it afterwards with a higher token.
func TestHoldLimitEndsRenewedLease(t *testing.T) {
	a, b, eng := limitClients(t)
	ctx := ctxT(t)
	start := time.Now()
	l := must(t)(a.Lock(ctx, "job", cerberus.WithWatchdog(limitWatchdog), cerberus.WithHoldLimit(holdLimit)))
	eng.watched.Store(l)
	next := must(t)(b.Lock(ctx, "job"))
	granted := time.Now()
	defer next.Unlock(context.Background())
	select {
	case <-l.Done():
	default:
		t.Fatalf("the waiter was granted before the holder was told")
	}
	if n := eng.untold.Load(); n != 0 || eng.calls.Load() != 1 {
		t.Fatalf("%d of %d releases came before Done closed", n, eng.calls.Load())
	}
	if held := granted.Sub(start); held < holdLimit || held > holdLimit+limitBound {
		t.Fatalf("key freed after %v, want within [%v, %v]", held, holdLimit, holdLimit+limitBound)
	}
	if !errors.Is(l.Err(), cerberus.ErrHoldLimit) || !errors.Is(l.Err(), cerberus.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrHoldLimit wrapping ErrLeaseLost", l.Err())
	}
	if next.Token() <= l.Token() {
		t.Fatalf("next token %d not above %d", next.Token(), l.Token())
	}
	if err := l.Unlock(context.Background()); !errors.Is(err, cerberus.ErrNotHeld) ||
		!errors.Is(err, cerberus.ErrHoldLimit) {
		t.Fatalf("Unlock after the limit: want ErrNotHeld and ErrHoldLimit, got %v", err)
	}
}

// TestHoldLimitUnlockFirst: a lease unlocked before its limit is released
// once; when the limit would have run out, nothing more is released and
// the next holder keeps the key.
func TestHoldLimitUnlockFirst(t *testing.T) {
	a, b, eng := limitClients(t)
	ctx := ctxT(t)
	l := must(t)(a.Lock(ctx, "job", cerberus.WithHoldLimit(100*time.Millisecond)))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next := must(t)(b.Lock(ctx, "job"))
	defer next.Unlock(context.Background())
	time.Sleep(300 * time.Millisecond) // past the limit the first lease had
	if n := eng.calls.Load(); n != 1 {
		t.Fatalf("%d releases, want 1", n)
	}
	if !errors.Is(l.Err(), cerberus.ErrReleased) {
		t.Fatalf("Err = %v, want ErrReleased", l.Err())
	}
	select {
	case <-next.Done():
		t.Fatalf("the next holder lost the key: %v", next.Err())
	default:
	}
}

// TestHoldLimitReentrant: an owner's nested leases share one hold, whose
// limit counts from the first grant whatever the nested call asks.
func TestHoldLimitReentrant(t *testing.T) {
	a, _, _ := limitClients(t)
	ctx := cerberus.WithOwner(ctxT(t))
	start := time.Now()
	outer := must(t)(a.Lock(ctx, "job", cerberus.WithWatchdog(limitWatchdog), cerberus.WithHoldLimit(holdLimit)))
	inner := must(t)(a.Lock(ctx, "job", cerberus.WithHoldLimit(time.Hour)))
	ended := waitEnd(t, inner, holdLimit+limitBound)
	if d := ended.Sub(start); d < holdLimit {
		t.Fatalf("inner lease ended after %v, before the limit %v", d, holdLimit)
	}
	if !errors.Is(outer.Err(), cerberus.ErrHoldLimit) || !errors.Is(inner.Err(), cerberus.ErrHoldLimit) {
		t.Fatalf("Err = %v / %v, want ErrHoldLimit", outer.Err(), inner.Err())
	}
	again := must(t)(a.Lock(ctx, "job"))
	defer again.Unlock(context.Background())
	if again.Token() <= outer.Token() {
		t.Fatalf("the owner re-entered an ended hold: token %d, was %d", again.Token(), outer.Token())
	}
}

// TestHoldLimitEveryLease: LockAll, a semaphore permit and a leadership
// term end at their hold limit too, and another process gets them next.
func TestHoldLimitEveryLease(t *testing.T) {
	a, b, _ := limitClients(t)
	ctx := ctxT(t)
	opts := []cerberus.Option{cerberus.WithWatchdog(limitWatchdog), cerberus.WithHoldLimit(holdLimit)}
	for name, take := range map[string]func(c *cerberus.Client, o ...cerberus.Option) (*cerberus.Lease, error){
		"LockAll": func(c *cerberus.Client, o ...cerberus.Option) (*cerberus.Lease, error) {
			return c.LockAll(ctx, []string{"x", "y"}, o...)
		},
		"Semaphore": func(c *cerberus.Client, o ...cerberus.Option) (*cerberus.Lease, error) {
			return c.Semaphore("pool", 1).Acquire(ctx, o...)
		},
		"Election": func(c *cerberus.Client, o ...cerberus.Option) (*cerberus.Lease, error) {
			return c.Election("leader").Campaign(ctx, "me", o...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			l := must(t)(take(a, opts...))
			waitEnd(t, l, holdLimit+limitBound)
			if !errors.Is(l.Err(), cerberus.ErrHoldLimit) {
				t.Fatalf("Err = %v, want ErrHoldLimit", l.Err())
			}
			next := must(t)(take(b))
			if next.Token() <= l.Token() {
				t.Fatalf("next token %d not above %d", next.Token(), l.Token())
			}
			_ = next.Unlock(context.Background())
		})
	}
}

// TestHoldLimitBadInput: limits out of range are refused before any I/O,
// by every call and by New.
func TestHoldLimitBadInput(t *testing.T) {
	a, _, eng := limitClients(t)
	ctx := ctxT(t)
	for _, d := range []time.Duration{-time.Second, time.Nanosecond, engine.MaxTTL + time.Second} {
		o := cerberus.WithHoldLimit(d)
		_, e1 := a.Lock(ctx, "k", o)
		_, e2 := a.LockAll(ctx, []string{"k", "l"}, o)
		_, e3 := a.Semaphore("s", 2).Acquire(ctx, o)
		_, e4 := a.Election("e").Campaign(ctx, "v", o)
		_, e5 := cerberus.New(memory.New(), o)
		for i, err := range []error{e1, e2, e3, e4, e5} {
			if !errors.Is(err, cerberus.ErrInvalidTTL) {
				t.Errorf("hold limit %v, call %d: want ErrInvalidTTL, got %v", d, i+1, err)
			}
		}
	}
	if n := eng.acquires.Load(); n != 0 {
		t.Fatalf("invalid hold limits reached the engine %d times", n)
	}
}

// TestHoldLimitRacesUnlock: an Unlock that meets the hold limit leaves
// one outcome, never both: released by Unlock (nil, ErrReleased) or ended
// by the limit (ErrNotHeld, ErrHoldLimit), with one release on the server
// either way.
func TestHoldLimitRacesUnlock(t *testing.T) {
	a, _, eng := limitClients(t)
	ctx := ctxT(t)
	const rounds, limit = 200, 10 * time.Millisecond
	outcomes := map[bool]int{}
	for i := range rounds {
		l := must(t)(a.Lock(ctx, "job", cerberus.WithHoldLimit(limit)))
		time.Sleep(limit - time.Duration(i%20)*100*time.Microsecond)
		uerr := l.Unlock(ctx)
		<-l.Done()
		released := uerr == nil && errors.Is(l.Err(), cerberus.ErrReleased)
		limited := errors.Is(uerr, cerberus.ErrNotHeld) && errors.Is(l.Err(), cerberus.ErrHoldLimit)
		if released == limited {
			t.Fatalf("round %d: Unlock = %v with Err = %v", i, uerr, l.Err())
		}
		outcomes[released]++
		// The limit releases after Done closes: wait a bounded time for it.
		for wait := 0; eng.calls.Load() < int64(i+1) && wait < 2000; wait++ {
			time.Sleep(time.Millisecond)
		}
		if n := eng.calls.Load(); n != int64(i+1) {
			t.Fatalf("round %d: %d releases on the server, want %d", i, n, i+1)
		}
	}
	t.Logf("released by Unlock %d times, by the limit %d times", outcomes[true], outcomes[false])
}

// TestHoldLimitOverFailover: under a failover.Manager a lease is an engine
// lease of its active engine; the limit ends it the same way.
func TestHoldLimitOverFailover(t *testing.T) {
	m, err := failover.New([]failover.NamedEngine{{Name: "a", Engine: memory.New()},
		{Name: "b", Engine: memory.New()}}, failover.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(m, cerberus.WithWatchdog(limitWatchdog), cerberus.WithHoldLimit(holdLimit))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	l := must(t)(c.Lock(ctx, "job"))
	next := must(t)(c.Lock(ctx, "job", cerberus.WithHoldLimit(0))) // 0: no limit for this call
	defer next.Unlock(context.Background())
	if !errors.Is(l.Err(), cerberus.ErrHoldLimit) {
		t.Fatalf("Err = %v, want ErrHoldLimit", l.Err())
	}
	if next.Token() <= l.Token() {
		t.Fatalf("next token %d not above %d", next.Token(), l.Token())
	}
	time.Sleep(holdLimit + 100*time.Millisecond) // past the client's default limit
	select {
	case <-next.Done():
		t.Fatalf("WithHoldLimit(0) kept the client's limit: %v", next.Err())
	default:
	}
}

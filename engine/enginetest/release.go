package enginetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// RunRelease checks the engine.Releaser of engines from newEngine (found
// with engine.ReleaserOf), with the holder, the waiter and the operator on
// three engines of their own, as if in three processes: a bad key is
// refused and a free key is ErrNotHeld; a force release of an exclusive
// key returns its holder, grants the waiting Acquire with a higher token,
// and closes the old holder's Done with ErrReleasedByOperator within its
// TTL, after which the old holder's Release is ErrNotHeld and leaves the
// new grant alone; a shared key's holders are all freed and told (on an
// engine with Limits().ExclusiveOnly, a shared request is refused instead). It fails
// when the engine has no Releaser.
func RunRelease(t *testing.T, newEngine Factory) {
	t.Helper()
	engines := make([]engine.Engine, 3)
	for i := range engines {
		e, err := newEngine()
		if err != nil {
			t.Fatalf("new engine: %v", err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines[i] = e
	}
	holder, waiter, operator := engines[0], engines[1], engines[2]
	rel := engine.ReleaserOf(operator)
	if rel == nil {
		t.Fatalf("%s has no engine.Releaser", operator.Name())
	}
	ctx := context.Background()
	if _, err := rel.ForceRelease(ctx, ""); !errors.Is(err, engine.ErrInvalidKey) {
		t.Errorf("ForceRelease(\"\") = %v; want engine.ErrInvalidKey", err)
	}
	base := "rel-" + runID()
	if hs, err := rel.ForceRelease(ctx, base+"/free"); !errors.Is(err, engine.ErrNotHeld) || len(hs) != 0 {
		t.Errorf("ForceRelease of a free key = %v, %v; want engine.ErrNotHeld", hs, err)
	}
	ttl := max(3*time.Second, holder.Limits().MinTTL)
	req := func(key string, mode engine.Mode, wait bool) engine.Request {
		return engine.Request{Key: key, Mode: mode, TTL: ttl, Renew: true, Wait: wait, Value: "v-" + key}
	}
	key := base + "/x"
	old, err := holder.Acquire(ctx, req(key, engine.Exclusive, false))
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	got := make(chan engine.Lease, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := waiter.Acquire(wctx, req(key, engine.Exclusive, true))
		if err != nil {
			t.Errorf("waiting acquire of %s: %v", key, err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // let the waiter queue
	hs, err := rel.ForceRelease(ctx, key)
	if err != nil || len(hs) != 1 || hs[0].Token != old.Token() || hs[0].Mode != engine.Exclusive {
		t.Fatalf("ForceRelease(%s) = %v, %v; want the holder with token %d", key, hs, err, old.Token())
	}
	released := time.Now()
	var next engine.Lease
	select {
	case next = <-got:
	case <-time.After(ttl + 10*time.Second):
		t.Fatalf("the waiter was not granted %s within %v of the force release", key, ttl+10*time.Second)
	}
	if next == nil {
		t.FailNow()
	}
	defer next.Release(ctx)
	if next.Token() <= old.Token() {
		t.Errorf("the next holder's token %d is not above the released one's %d", next.Token(), old.Token())
	}
	mustBeTold(t, old, released, ttl)
	if err := old.Release(ctx); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("the released holder's Release = %v; want engine.ErrNotHeld", err)
	}
	select {
	case <-next.Done():
		t.Errorf("the next holder lost %s when the released holder called Release: %v", key, next.Err())
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := operator.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: ttl}); !errors.Is(err, engine.ErrNotAcquired) {
		t.Errorf("a TryLock of %s while the next holder holds it = %v; want engine.ErrNotAcquired", key, err)
	}

	shared := base + "/s"
	if holder.Limits().ExclusiveOnly {
		if err := holder.Validate(req(shared, engine.Shared, false)); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("Validate of a shared request on an exclusive-only engine = %v; want engine.ErrInvalidRequest", err)
		}
		return
	}
	s1, err := holder.Acquire(ctx, req(shared, engine.Shared, false))
	if err != nil {
		t.Fatalf("acquire %s shared: %v", shared, err)
	}
	s2, err := waiter.Acquire(ctx, req(shared, engine.Shared, false))
	if err != nil {
		t.Fatalf("acquire %s shared: %v", shared, err)
	}
	hs, err = rel.ForceRelease(ctx, shared)
	if err != nil || len(hs) != 2 || hs[0].Token != s1.Token() || hs[1].Token != s2.Token() {
		t.Fatalf("ForceRelease(%s) = %v, %v; want the holders with tokens %d and %d", shared, hs, err, s1.Token(), s2.Token())
	}
	released = time.Now()
	mustBeTold(t, s1, released, ttl)
	mustBeTold(t, s2, released, ttl)
	x, err := operator.Acquire(ctx, engine.Request{Key: shared, Mode: engine.Exclusive, TTL: ttl})
	if err != nil {
		t.Fatalf("TryLock of %s after its force release: %v", shared, err)
	}
	_ = x.Release(ctx)
}

// mustBeTold waits for l's Done, which must close within ttl of the force
// release at released (by the holder's next renewal), with an Err wrapping
// engine.ErrReleasedByOperator.
func mustBeTold(t *testing.T, l engine.Lease, released time.Time, ttl time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(time.Until(released.Add(ttl + 2*time.Second))):
		t.Errorf("%s (token %d) was not told of its force release within %v", l.Key(), l.Token(), ttl+2*time.Second)
		return
	}
	if err := l.Err(); !errors.Is(err, engine.ErrReleasedByOperator) || !errors.Is(err, engine.ErrLeaseLost) {
		t.Errorf("%s (token %d) ended with %v; want engine.ErrReleasedByOperator", l.Key(), l.Token(), err)
	}
}

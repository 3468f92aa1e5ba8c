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
// key returns its holder, grants the waiting Acquire at once (within
// GrantedWithin, well before the old lease could expire) with a higher
// token, and closes the old holder's Done with ErrReleasedByOperator
// within its TTL, after which the old holder's Release is ErrNotHeld and
// leaves the new grant alone; a shared key's holders are all freed and
// told (on an engine with Limits().ExclusiveOnly, a shared request is
// refused instead). It fails when the engine has no Releaser.
func RunRelease(t *testing.T, newEngine Factory) {
	t.Helper()
	r := newReleaseRig(t, newEngine)
	base := "rel-" + runID()
	r.badInput(base)
	r.exclusive(base + "/x")
	r.shared(base + "/s")
}

// GrantedWithin bounds, in RunRelease, the time from a force release's
// return to the waiting Acquire's grant: "at once", with room for a
// loaded machine and for engines whose waiters poll, yet short of the
// lease period RunRelease holds with, so that a waiter granted only when
// the freed lease expires fails.
const GrantedWithin = 2500 * time.Millisecond

// releaseRig is RunRelease's three engines and the lease period.
type releaseRig struct {
	t                        *testing.T
	holder, waiter, operator engine.Engine
	rel                      engine.Releaser
	ttl                      time.Duration
}

// newReleaseRig makes the three engines, closed when the test ends.
func newReleaseRig(t *testing.T, newEngine Factory) *releaseRig {
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
	r := &releaseRig{t: t, holder: engines[0], waiter: engines[1], operator: engines[2]}
	if r.rel = engine.ReleaserOf(r.operator); r.rel == nil {
		t.Fatalf("%s has no engine.Releaser", r.operator.Name())
	}
	r.ttl = max(3*GrantedWithin, r.holder.Limits().MinTTL)
	return r
}

// req is a renewed request for key.
func (r *releaseRig) req(key string, mode engine.Mode, wait bool) engine.Request {
	return engine.Request{Key: key, Mode: mode, TTL: r.ttl, Renew: true, Wait: wait, Value: "v-" + key}
}

// badInput: a bad key is refused, a free key is ErrNotHeld.
func (r *releaseRig) badInput(base string) {
	t, ctx := r.t, context.Background()
	t.Helper()
	if _, err := r.rel.ForceRelease(ctx, ""); !errors.Is(err, engine.ErrInvalidKey) {
		t.Errorf("ForceRelease(\"\") = %v; want engine.ErrInvalidKey", err)
	}
	if hs, err := r.rel.ForceRelease(ctx, base+"/free"); !errors.Is(err, engine.ErrNotHeld) || len(hs) != 0 {
		t.Errorf("ForceRelease of a free key = %v, %v; want engine.ErrNotHeld", hs, err)
	}
}

// exclusive force-releases key, held exclusively by the holder while the
// waiter waits for it, and checks the grant, the tokens and the telling.
func (r *releaseRig) exclusive(key string) {
	t, ctx := r.t, context.Background()
	t.Helper()
	old, err := r.holder.Acquire(ctx, r.req(key, engine.Exclusive, false))
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	got := make(chan engine.Lease, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, r.ttl+20*time.Second)
		defer cancel()
		l, err := r.waiter.Acquire(wctx, r.req(key, engine.Exclusive, true))
		if err != nil {
			t.Errorf("waiting acquire of %s: %v", key, err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // let the waiter queue
	hs, err := r.rel.ForceRelease(ctx, key)
	if err != nil || len(hs) != 1 || hs[0].Token != old.Token() || hs[0].Mode != engine.Exclusive {
		t.Fatalf("ForceRelease(%s) = %v, %v; want the holder with token %d", key, hs, err, old.Token())
	}
	released := time.Now()
	next := <-got
	if next == nil {
		t.FailNow()
	}
	defer next.Release(ctx)
	if took := time.Since(released); took > GrantedWithin {
		t.Errorf("the waiter was granted %s %v after the force release; want at once (within %v)", key, took, GrantedWithin)
	}
	if next.Token() <= old.Token() {
		t.Errorf("the next holder's token %d is not above the released one's %d", next.Token(), old.Token())
	}
	mustBeTold(t, old, released, r.ttl)
	r.staleReleaseChangesNothing(old, next)
}

// staleReleaseChangesNothing: the released holder's Release is ErrNotHeld
// and leaves next, the key's holder now, alone.
func (r *releaseRig) staleReleaseChangesNothing(old, next engine.Lease) {
	t, ctx := r.t, context.Background()
	t.Helper()
	if err := old.Release(ctx); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("the released holder's Release = %v; want engine.ErrNotHeld", err)
	}
	select {
	case <-next.Done():
		t.Errorf("the next holder lost %s when the released holder called Release: %v", next.Key(), next.Err())
	case <-time.After(200 * time.Millisecond):
	}
	_, err := r.operator.Acquire(ctx, engine.Request{Key: next.Key(), Mode: engine.Exclusive, TTL: r.ttl})
	if !errors.Is(err, engine.ErrNotAcquired) {
		t.Errorf("a TryLock of %s while the next holder holds it = %v; want engine.ErrNotAcquired", next.Key(), err)
	}
}

// shared force-releases key held shared by the holder and the waiter:
// both are freed and told, and the key is free.
func (r *releaseRig) shared(key string) {
	t, ctx := r.t, context.Background()
	t.Helper()
	if r.holder.Limits().ExclusiveOnly {
		if err := r.holder.Validate(r.req(key, engine.Shared, false)); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("Validate of a shared request on an exclusive-only engine = %v; want engine.ErrInvalidRequest", err)
		}
		return
	}
	s1, err := r.holder.Acquire(ctx, r.req(key, engine.Shared, false))
	if err != nil {
		t.Fatalf("acquire %s shared: %v", key, err)
	}
	s2, err := r.waiter.Acquire(ctx, r.req(key, engine.Shared, false))
	if err != nil {
		t.Fatalf("acquire %s shared: %v", key, err)
	}
	hs, err := r.rel.ForceRelease(ctx, key)
	if err != nil || len(hs) != 2 || hs[0].Token != s1.Token() || hs[1].Token != s2.Token() {
		t.Fatalf("ForceRelease(%s) = %v, %v; want the holders with tokens %d and %d", key, hs, err, s1.Token(), s2.Token())
	}
	released := time.Now()
	mustBeTold(t, s1, released, r.ttl)
	mustBeTold(t, s2, released, r.ttl)
	x, err := r.operator.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: r.ttl})
	if err != nil {
		t.Fatalf("TryLock of %s after its force release: %v", key, err)
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

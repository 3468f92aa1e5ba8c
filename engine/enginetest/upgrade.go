package enginetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// RunReleaseUpgrade checks a force release on a store of the previous
// version, which lacks what the engine's Releaser writes (an SQL engine's
// tables before its Migrate added the tombstones' table): holder and op
// are two engines on that store, and migrate brings it up to date. A
// renewed exclusive lease taken by holder survives op's ForceRelease,
// which must fail with an *engine.OpError and change nothing (the lease
// is renewed past its TTL and still held); after migrate, ForceRelease
// frees it, and holder's renewal tells it with
// engine.ErrReleasedByOperator.
func RunReleaseUpgrade(t *testing.T, holder, op engine.Engine, migrate func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rel := engine.ReleaserOf(op)
	if rel == nil {
		t.Fatalf("%s has no engine.Releaser", op.Name())
	}
	key := "up-" + runID()
	ttl := max(time.Second, holder.Limits().MinTTL)
	l, err := holder.Acquire(ctx, engine.Request{Key: key, TTL: ttl, Renew: true, Value: "h"})
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	defer l.Release(context.Background())
	var oe *engine.OpError
	if hs, err := rel.ForceRelease(ctx, key); !errors.As(err, &oe) || hs != nil {
		t.Fatalf("ForceRelease before the upgrade = %v, %v; want an *engine.OpError", hs, err)
	}
	time.Sleep(ttl + ttl/2) // renewed, not freed
	select {
	case <-l.Done():
		t.Fatalf("the holder lost %s after a failed ForceRelease: %v", key, l.Err())
	default:
	}
	if err := migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if hs, err := rel.ForceRelease(ctx, key); err != nil || len(hs) != 1 || hs[0].Token != l.Token() {
		t.Fatalf("ForceRelease after the upgrade = %v, %v; want the holder with token %d", hs, err, l.Token())
	}
	mustBeTold(t, l, time.Now(), ttl)
}

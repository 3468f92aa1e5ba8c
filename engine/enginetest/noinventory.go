package enginetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// RunNoInventory checks an engine from newEngine that does not serve
// Holders, List and ForceRelease although its type has them (a SQL session
// engine without holder records): each refuses a bad argument first, with
// the same error as an engine that serves it, then fails with an error
// wrapping errors.ErrUnsupported and changes nothing, so that a lease held
// meanwhile stays held. It fails when the engine has none of the three.
func RunNoInventory(t *testing.T, newEngine Factory) {
	t.Helper()
	e, err := newEngine()
	if err != nil {
		t.Fatalf("new engine: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ins, ls, rel := engine.InspectorOf(e), engine.ListerOf(e), engine.ReleaserOf(e)
	if ins == nil && ls == nil && rel == nil {
		t.Fatalf("%s has no engine.Inspector, engine.Lister or engine.Releaser", e.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	key := "noinv-" + runID()
	l, err := e.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: longTTL, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(context.Background()) }()
	check := func(name string, call func(key string) error) {
		if err := call(""); err == nil || errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s of a bad argument: %v, want the argument's error first", name, err)
		}
		if err := call(key); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: %v, want errors.ErrUnsupported", name, err)
		}
	}
	if ins != nil {
		check("Holders", func(k string) error { _, err := ins.Holders(ctx, k); return err })
	}
	if ls != nil {
		check("List", func(k string) error {
			if k != "" {
				k = engine.AllKeys
			}
			_, err := ls.List(ctx, k, 0)
			return err
		})
	}
	if rel != nil {
		check("ForceRelease", func(k string) error { _, err := rel.ForceRelease(ctx, k); return err })
	}
	select {
	case <-l.Done():
		t.Fatalf("the lease ended: %v", l.Err())
	case <-time.After(10 * time.Millisecond):
	}
	if _, err := e.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: longTTL}); !errors.Is(err,
		engine.ErrNotAcquired) {
		t.Errorf("TryLock of the key held through the calls: %v, want engine.ErrNotAcquired", err)
	}
}

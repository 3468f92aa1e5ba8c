package engine_test

import (
	"context"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
)

// wrapped hides the engine inside from type assertions, as the engines
// package config builds do, and hands it out through Unwrap.
type wrapped struct{ inner engine.Engine }

func (w wrapped) Name() string                      { return w.inner.Name() }
func (w wrapped) Limits() engine.Limits             { return w.inner.Limits() }
func (w wrapped) Validate(req engine.Request) error { return w.inner.Validate(req) }
func (w wrapped) Ping(ctx context.Context) error    { return w.inner.Ping(ctx) }
func (w wrapped) Close() error                      { return w.inner.Close() }
func (w wrapped) Unwrap() engine.Engine             { return w.inner }
func (w wrapped) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	return w.inner.Acquire(ctx, req)
}

// bare is an engine with neither an Inspector nor a Watcher, and no
// Unwrap.
type bare struct{ engine.Engine }

// TestInspectorOfLooksThroughWrappers: InspectorOf and WatcherOf find the
// memory engine's Inspector and Watcher under two wrappers, and report
// nil for an engine that has neither.
func TestInspectorOfLooksThroughWrappers(t *testing.T) {
	m := memory.New()
	defer m.Close()
	e := wrapped{wrapped{m}}
	if _, ok := engine.Engine(e).(engine.Inspector); ok {
		t.Fatal("the wrapper itself is an Inspector; the test needs one that is not")
	}
	if engine.InspectorOf(e) != engine.Inspector(m) {
		t.Error("InspectorOf did not find the memory engine under two wrappers")
	}
	if engine.WatcherOf(e) != engine.Watcher(m) {
		t.Error("WatcherOf did not find the memory engine under two wrappers")
	}
	if in, w := engine.InspectorOf(bare{m}), engine.WatcherOf(bare{m}); in != nil || w != nil {
		t.Errorf("an engine without Unwrap, Inspector or Watcher: InspectorOf %v, WatcherOf %v; want nil", in, w)
	}
	if engine.InspectorOf(nil) != nil || engine.WatcherOf(nil) != nil {
		t.Error("nil engine: want nil")
	}
}

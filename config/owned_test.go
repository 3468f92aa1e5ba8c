package config

import (
	"sync/atomic"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/memory"
)

// TestOwnedConformance holds the wrapper config puts around an engine
// built with clients of its own to the engine contract, and checks that
// Close closes those clients, once.
func TestOwnedConformance(t *testing.T) {
	store := memory.NewStore()
	var made, closed atomic.Int64
	enginetest.Run(t, func() (engine.Engine, error) {
		made.Add(1)
		e, err := own(memory.New(memory.WithStore(store)), nil, func() error { closed.Add(1); return nil })
		if _, ok := e.(engine.Wrapper); !ok {
			t.Errorf("own with a closer returned %T, not an engine.Wrapper", e)
		}
		return e, err
	}, enginetest.Options{})
	if m, c := made.Load(), closed.Load(); c != m {
		t.Errorf("%d wrapped engines made, their clients closed %d times; want each once", m, c)
	}
}

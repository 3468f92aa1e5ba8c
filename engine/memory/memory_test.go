package memory

import (
	"context"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// TestConformance runs the suite without the Unreachable and AccessDenied
// hooks: the memory engine has no server to lose and no access control.
func TestConformance(t *testing.T) {
	store := NewStore()
	enginetest.Run(t, func() (engine.Engine, error) {
		return New(WithStore(store)), nil
	}, enginetest.Options{
		Leftovers: func(_ context.Context, key string) ([]string, error) {
			if store.has(key) {
				return []string{"entry for " + key}, nil
			}
			return nil, nil
		},
	})
}

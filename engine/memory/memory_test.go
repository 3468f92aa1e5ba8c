package memory

import (
	"context"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

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

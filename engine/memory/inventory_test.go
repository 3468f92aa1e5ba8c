package memory

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// TestList runs enginetest.RunList on engines sharing one Store.
func TestList(t *testing.T) {
	store := NewStore()
	enginetest.RunList(t, func() (engine.Engine, error) { return New(WithStore(store)), nil })
}

package memory

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// TestRelease runs enginetest.RunRelease on engines sharing one Store.
func TestRelease(t *testing.T) {
	s := NewStore()
	enginetest.RunRelease(t, func() (engine.Engine, error) { return New(WithStore(s)), nil })
}

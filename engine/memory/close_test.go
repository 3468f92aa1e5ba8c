package memory

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// TestCloseTellsFirst: a closing engine tells its holders before their keys
// are free (enginetest.RunCloseTellsFirst).
func TestCloseTellsFirst(t *testing.T) {
	store := NewStore()
	enginetest.RunCloseTellsFirst(t, func() (engine.Engine, error) { return New(WithStore(store)), nil })
}

package redis

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestCloseTellsFirst: a closing engine tells its holders before their keys
// are free (enginetest.RunCloseTellsFirst).
func TestCloseTellsFirst(t *testing.T) {
	addr := testenv.RedisAddr(t)
	enginetest.RunCloseTellsFirst(t, func() (engine.Engine, error) { return New(newClient(t, addr)) })
}

package consul_test

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestCloseTellsFirst: a closing engine tells its holders before their keys
// are free (enginetest.RunCloseTellsFirst).
func TestCloseTellsFirst(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	enginetest.RunCloseTellsFirst(t, func() (engine.Engine, error) {
		return consul.New(newClient(t, addr), consul.WithPrefix(testPrefix), consul.WithLockDelay(0))
	})
}

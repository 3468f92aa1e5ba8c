package zookeeper_test

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestCloseTellsFirst: a closing engine tells its holders before their keys
// are free (enginetest.RunCloseTellsFirst).
func TestCloseTellsFirst(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	enginetest.RunCloseTellsFirst(t, func() (engine.Engine, error) {
		return zookeeper.Dial([]string{addr}, zookeeper.WithSessionTimeout(testTimeout), zookeeper.WithPrefix(base), zookeeper.WithLogger(quiet{}))
	})
}

package zookeeper_test

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestList runs enginetest.RunList under a base path of the test's own.
func TestList(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	base := testBase(t, rawConn(t, addr))
	enginetest.RunList(t, func() (engine.Engine, error) {
		return zookeeper.Dial([]string{addr}, zookeeper.WithSessionTimeout(testTimeout), zookeeper.WithPrefix(base), zookeeper.WithLogger(quiet{}))
	})
}

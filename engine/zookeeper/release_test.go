package zookeeper_test

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestForceRelease runs enginetest.RunRelease, then
// enginetest.RunPausedRelease with a holder process, under a base path of
// the test's own.
func TestForceRelease(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	base := testBase(t, rawConn(t, addr))
	newEngine := func() (engine.Engine, error) {
		return zookeeper.Dial([]string{addr}, zookeeper.WithSessionTimeout(testTimeout), zookeeper.WithPrefix(base), zookeeper.WithLogger(quiet{}))
	}
	enginetest.RunRelease(t, newEngine)
	enginetest.RunPausedRelease(t, newEngine, holderAddrEnv+"="+addr, holderBaseEnv+"="+base)
}

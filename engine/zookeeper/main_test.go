package zookeeper_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// engine, its watches and its connection must stop what they started when
// they are closed. Started as a holder process of
// enginetest.RunPausedRelease, it holds a key instead (see holderEngine).
func TestMain(m *testing.M) {
	if code, ok := enginetest.Hold(holderEngine); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// The environment TestForceRelease gives its holder process.
const (
	holderAddrEnv = "CERBERUS_ZK_TEST_HOLDER_ADDR"
	holderBaseEnv = "CERBERUS_ZK_TEST_HOLDER_BASE"
)

// holderEngine is the engine of a holder process: on the server and under
// the base path its environment names.
func holderEngine() (engine.Engine, error) {
	return zookeeper.Dial([]string{os.Getenv(holderAddrEnv)}, zookeeper.WithSessionTimeout(testTimeout),
		zookeeper.WithPrefix(os.Getenv(holderBaseEnv)), zookeeper.WithLogger(quiet{}))
}

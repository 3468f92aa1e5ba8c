package etcd_test

import (
	"os"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// holderAddrEnv gives a holder process of enginetest.RunPausedRelease the
// etcd address (see holderEngine).
const holderAddrEnv = "CERBERUS_ETCD_HOLDER_ADDR"

// holderEngine is the engine of a holder process: on the server its
// environment names, under the test prefix.
func holderEngine() (engine.Engine, error) {
	return dial(clientv3.Config{Endpoints: []string{os.Getenv(holderAddrEnv)}})
}

// TestMain fails the package's tests if any goroutine outlives them: every
// engine and client must stop what it started when it is closed.
//
// Started by enginetest.RunPausedRelease, it holds a key instead.
func TestMain(m *testing.M) {
	if code, ok := enginetest.Hold(holderEngine); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

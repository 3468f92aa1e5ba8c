package etcd_test

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRelease runs enginetest.RunRelease under the test prefix, with the
// test's 3s etcd lease: a holder is told by its engine's next renewal.
func TestRelease(t *testing.T) {
	addr := testenv.EtcdAddr(t)
	enginetest.RunRelease(t, func() (engine.Engine, error) {
		return dial(clientv3.Config{Endpoints: []string{addr}})
	})
}

// TestPausedRelease runs enginetest.RunPausedRelease: a holder process
// stopped with SIGSTOP is force-released, and told when it resumes (by its
// engine's first keep-alive, which reads the release marks).
func TestPausedRelease(t *testing.T) {
	addr := testenv.EtcdAddr(t)
	enginetest.RunPausedRelease(t, func() (engine.Engine, error) {
		return dial(clientv3.Config{Endpoints: []string{addr}})
	}, holderAddrEnv+"="+addr)
}

package redis

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestRelease runs enginetest.RunRelease on a single Redis server.
func TestRelease(t *testing.T) {
	addr := testenv.RedisAddr(t)
	enginetest.RunRelease(t, func() (engine.Engine, error) { return New(newClient(t, addr)) })
}

// TestClusterRelease runs enginetest.RunRelease on the three-master
// Cluster: the script and the mark live in the key's slot.
func TestClusterRelease(t *testing.T) {
	addrs := testenv.RedisClusterAddrs(t)
	enginetest.RunRelease(t, func() (engine.Engine, error) { return New(newClusterClient(t, addrs)) })
}

// TestRedlockRelease runs enginetest.RunRelease on Redlock over the shared
// Redlock nodes.
func TestRedlockRelease(t *testing.T) {
	addrs := testenv.RedlockAddrs(t)
	enginetest.RunRelease(t, func() (engine.Engine, error) {
		clients := make([]Client, len(addrs))
		for i, a := range addrs {
			clients[i] = newClient(t, a)
		}
		return NewRedlock(clients)
	})
}

// TestPausedRelease runs enginetest.RunPausedRelease on a single Redis
// server: a holder process stopped with SIGSTOP is force-released, and
// told when it resumes (its renewal finds the lease gone and reads the
// mark).
func TestPausedRelease(t *testing.T) {
	addr := testenv.RedisAddr(t)
	enginetest.RunPausedRelease(t, func() (engine.Engine, error) { return New(newClient(t, addr)) },
		holderAddrEnv+"="+addr)
}

package zookeeper_test

import (
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// The tests of this file check DESIGN.md's contract 5 on ZooKeeper: a
// key's token (the czxid of its queue node) is above every token granted
// before, after the client restarts, after the server is killed with
// SIGKILL and restarted from its data directory (its transaction log), and
// after an ensemble's leader is killed (the new leader's epoch is higher).

// restartWait bounds the retries of a grant while the server restarts or
// the ensemble elects.
const restartWait = 30 * time.Second

// retry bounds the grants of this file's tests (see enginetest.Retry).
var retry = enginetest.Retry{Within: restartWait, Attempt: 5 * time.Second, Pause: 50 * time.Millisecond}

// grantOnce acquires req on e, trying again for up to restartWait while the
// engine reports the server unavailable.
func grantOnce(t *testing.T, e engine.Engine, req engine.Request) engine.Lease {
	t.Helper()
	return retry.Grant(t, e, req)
}

// cycles grants key on e n times (every third grant shared), releasing each
// lease, and returns the largest token seen (see enginetest.Retry.Cycles).
func cycles(t *testing.T, e engine.Engine, key string, n int, after uint64) uint64 {
	t.Helper()
	return retry.Cycles(t, e, try(key), n, after)
}

// engineOn dials an engine on servers under base, closed when the test ends.
func engineOn(t *testing.T, base string, servers ...string) *zookeeper.Engine {
	t.Helper()
	e, err := zookeeper.Dial(servers, zookeeper.WithSessionTimeout(4*time.Second), zookeeper.WithLogger(quiet{}), zookeeper.WithPrefix(base))
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestTokensAfterClientRestart: three engines in turn, each closed before
// the next opens, as a restarted client would be; each continues above
// the last token of the one before.
func TestTokensAfterClientRestart(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	base := testBase(t, rawConn(t, addr))
	var last uint64
	for range 3 {
		e := engineOn(t, base, addr)
		last = cycles(t, e, "client-restart", 10, last)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTokensAfterServerKill: grants on a private server, which is then
// killed with SIGKILL and restarted from its data directory; the same
// engine and a fresh one continue above the last token.
func TestTokensAfterServerKill(t *testing.T) {
	srv := testenv.StartZooKeeper(t)
	e := engineOn(t, "/kill", srv.Addr)
	last := cycles(t, e, "kill", 20, 0)
	srv.Kill()
	srv.Restart()
	after := cycles(t, e, "kill", 3, last)
	t.Logf("czxid before the kill %#x, after the restart %#x", last, after)
	cycles(t, engineOn(t, "/kill", srv.Addr), "kill", 3, after)
}

// TestTokensAfterLeaderKill: a three-node ensemble grants, its leader is
// killed with SIGKILL, and the grants under the new leader continue above
// the last token.
func TestTokensAfterLeaderKill(t *testing.T) {
	ens := testenv.StartZooKeeperEnsemble(t, 3)
	e := engineOn(t, "/leader", ens.Addrs...)
	last := cycles(t, e, "leader", 20, 0)
	old := ens.Leader()
	ens.Nodes[old].Kill()
	if now := ens.Leader(); now == old {
		t.Fatalf("node %d still leads after its kill", old+1)
	}
	after := cycles(t, e, "leader", 5, last)
	t.Logf("czxid under the old leader %#x, under the new one %#x", last, after)
}

// TestTokensAfterTreeDeleted: grants, then another engine takes a shared
// lease, and the whole lock tree (the holder's ephemeral node, the lock
// nodes, the base path) is deleted under it, as an operator who wipes it
// would; the next grants continue above every token before, as no delete
// lowers the zxid.
func TestTokensAfterTreeDeleted(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	e := engineOn(t, base, addr)
	last := cycles(t, e, "wipe", 20, 0)
	req := try("wipe")
	req.Mode = engine.Shared
	held := grantOnce(t, engineOn(t, base, addr), req)
	parent := base + "/" + zookeeper.EncodeKey("wipe")
	if kids := children(t, admin, parent); len(kids) != 1 {
		t.Fatalf("queue of the held key: %v, want the holder's node", kids)
	}
	root := base[:len(base)-len("/locks")]
	removeTree(admin, root)
	if ok, _, err := admin.Exists(root); err != nil || ok {
		t.Fatalf("%s still exists after the delete (%v)", root, err)
	}
	cycles(t, e, "wipe", 3, max(last, held.Token()))
}

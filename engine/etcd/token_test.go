package etcd_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/etcd"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// The tests of this file check DESIGN.md's contract 5 on etcd: a key's
// token (the create revision of its queue entry) is above every token
// granted before, after the client restarts, after the server is killed
// with SIGKILL and restarted from its data directory, and after a
// cluster's leader is killed.

// retry bounds the grants of this file's tests (see enginetest.Retry).
var retry = enginetest.Retry{Within: hang, Attempt: 5 * time.Second, Pause: 50 * time.Millisecond}

// grantOnce acquires req on e, trying again for up to hang while the
// engine reports the server unavailable.
func grantOnce(t *testing.T, e engine.Engine, req engine.Request) engine.Lease {
	t.Helper()
	return retry.Grant(t, e, req)
}

// once is a request in mode that does not wait and is not renewed.
func once(key string, mode engine.Mode) engine.Request {
	return engine.Request{Key: key, Mode: mode, TTL: 10 * time.Second}
}

// cycles grants key on e n times (every third grant shared), releasing each
// lease, and returns the largest token seen (see enginetest.Retry.Cycles).
func cycles(t *testing.T, e engine.Engine, key string, n int, after uint64) uint64 {
	t.Helper()
	return retry.Cycles(t, e, once(key, engine.Exclusive), n, after)
}

// engineOn dials an engine on endpoints, closed when the test ends.
func engineOn(t *testing.T, endpoints ...string) *etcd.Engine {
	t.Helper()
	e, err := dial(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestTokensAfterClientRestart: three engines in turn on one private
// server, each closed before the next opens, as a restarted client would
// be; each continues above the last token of the one before.
func TestTokensAfterClientRestart(t *testing.T) {
	srv := testenv.StartEtcd(t)
	var last uint64
	for range 3 {
		e := engineOn(t, srv.Addr)
		last = cycles(t, e, "client-restart", 10, last)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTokensAfterServerKill: grants, then the server is killed with
// SIGKILL and restarted from its data directory; the same engine and a
// fresh one continue above the last token.
func TestTokensAfterServerKill(t *testing.T) {
	srv := testenv.StartEtcd(t)
	e := engineOn(t, srv.Addr)
	last := cycles(t, e, "kill", 20, 0)
	srv.Kill()
	srv.Restart()
	last = cycles(t, e, "kill", 3, last)
	srv.Kill()
	srv.Restart()
	cycles(t, engineOn(t, srv.Addr), "kill", 3, last)
}

// TestTokensAfterLeaderKill: a three-member cluster grants, its leader is
// killed with SIGKILL, and the grants on the new leader continue above the
// last token; so do those after the old leader is back.
func TestTokensAfterLeaderKill(t *testing.T) {
	c := testenv.StartEtcdCluster(t, 3)
	e := engineOn(t, c.Addrs...)
	last := cycles(t, e, "leader", 20, 0)
	old := c.Leader()
	c.Nodes[old].Kill()
	if now := c.Leader(); now == old {
		t.Fatalf("member %d still leads after its kill", old)
	}
	last = cycles(t, e, "leader", 5, last)
	c.Nodes[old].Restart()
	cycles(t, engineOn(t, c.Addrs[old]), "leader", 3, last)
}

// TestTokensAfterDeleteAndCompaction: grants, then another engine takes a
// shared lease, and every key on a private server (the holder's entry
// too) is deleted, the history compacted to the current revision and the
// member defragmented, as an operator who wipes the store would; the next
// grants continue above every token before, as no delete or compaction
// lowers the revision.
func TestTokensAfterDeleteAndCompaction(t *testing.T) {
	srv := testenv.StartEtcd(t)
	e := engineOn(t, srv.Addr)
	last := cycles(t, e, "wipe", 20, 0)
	held := grantOnce(t, engineOn(t, srv.Addr), once("wipe", engine.Shared))
	admin := client(t, clientv3.Config{Endpoints: []string{srv.Addr}})
	ctx := bounded(t)
	del, err := admin.Delete(ctx, "", clientv3.WithFromKey())
	if err != nil || del.Deleted == 0 {
		t.Fatalf("delete every key: %v (%v)", del, err)
	}
	if _, err := admin.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Defragment(ctx, srv.Addr); err != nil {
		t.Fatal(err)
	}
	if n, err := admin.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithCountOnly()); err != nil || n.Count != 0 {
		t.Fatalf("after the wipe: %v (%v)", n, err)
	}
	cycles(t, e, "wipe", 3, max(last, held.Token()))
}

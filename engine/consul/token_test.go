package consul_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// The tests of this file check DESIGN.md's contract 5 on Consul: a key's
// token (the Raft index of the write that granted it) is above every token
// granted before, after the client restarts, after every server of a
// cluster is killed with SIGKILL and restarted from its data directory,
// and after a cluster's leader is killed. A dev agent keeps nothing on
// disk, so its restart is not among them: see README.md, "What a token
// survives".

// restartWait bounds the retries of a grant while servers restart or
// elect.
const restartWait = 60 * time.Second

// grantOnce acquires req on e, trying again for up to restartWait while the
// engine reports the server unavailable.
func grantOnce(t *testing.T, e engine.Engine, req engine.Request) engine.Lease {
	t.Helper()
	var err error
	for deadline := time.Now().Add(restartWait); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var l engine.Lease
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l, err = e.Acquire(ctx, req)
		cancel()
		if err == nil {
			return l
		}
		if !errors.Is(err, engine.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			break
		}
	}
	t.Fatalf("acquire %s: %v", req.Key, err)
	return nil
}

// cycles grants key on e n times (every third grant shared), releasing each
// lease, and returns the largest token seen; each token must be above the
// one before, the first above after. A token that is not fails the test
// and ends the cycles.
func cycles(t *testing.T, e engine.Engine, key string, n int, after uint64) uint64 {
	t.Helper()
	for i := range n {
		mode := engine.Exclusive
		if i%3 == 2 {
			mode = engine.Shared
		}
		l := grantOnce(t, e, try(key, mode))
		if err := l.Release(ctxFor(t, restartWait)); err != nil {
			t.Fatal(err)
		}
		if l.Token() <= after {
			t.Errorf("grant %d (%v) of %s: token %d after %d; tokens must strictly increase", i+1, mode, key,
				l.Token(), after)
			return after
		}
		after = l.Token()
	}
	return after
}

// TestTokensAfterClientRestart: three engines in turn on the shared agent,
// each closed before the next opens, as a restarted client would be; each
// continues above the last token of the one before.
func TestTokensAfterClientRestart(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	key := testKey(t)
	var last uint64
	for range 3 {
		e := newEngine(t, addr, consul.WithLockDelay(0))
		last = cycles(t, e, key, 10, last)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterTokensAfterKill: a three-server cluster grants, every server
// is killed with SIGKILL and all are restarted from their data
// directories; the same engine and a fresh one continue above the last
// token.
func TestClusterTokensAfterKill(t *testing.T) {
	c := testenv.StartConsulCluster(t, 3)
	e := newEngine(t, c.Addrs[0], consul.WithLockDelay(0))
	key := testKey(t)
	last := cycles(t, e, key, 20, 0)
	c.Restart()
	after := cycles(t, e, key, 3, last)
	t.Logf("index before the kill %d, after the restart %d", last, after)
	cycles(t, newEngine(t, c.Addrs[1], consul.WithLockDelay(0)), key, 3, after)
}

// TestClusterTokensAfterLeaderKill: a three-server cluster grants, its
// leader is killed with SIGKILL, and the grants under the new leader
// continue above the last token. The engine talks to a server that is not
// the leader.
func TestClusterTokensAfterLeaderKill(t *testing.T) {
	c := testenv.StartConsulCluster(t, 3)
	old := c.Leader()
	e := newEngine(t, c.Addrs[(old+1)%3], consul.WithLockDelay(0))
	key := testKey(t)
	last := cycles(t, e, key, 20, 0)
	c.Nodes[old].Kill()
	var now int
	for deadline := time.Now().Add(restartWait); ; time.Sleep(100 * time.Millisecond) {
		if now = c.Leader(); now != old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %d still leads %v after its kill", old+1, restartWait)
		}
	}
	after := cycles(t, e, key, 5, last)
	t.Logf("index under server %d %d, under server %d %d", old+1, last, now+1, after)
}

// TestTokensAfterTreeDeleted: grants, then another engine takes a shared
// lease, and the key's whole KV folder (its document and the holder's
// contender key) is deleted under it, as an operator who wipes the store
// would; the next grants continue above every token before, as no delete
// lowers the Raft index.
func TestTokensAfterTreeDeleted(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	e := newEngine(t, addr, consul.WithLockDelay(0))
	key := testKey(t)
	last := cycles(t, e, key, 20, 0)
	held := grantOnce(t, newEngine(t, addr, consul.WithLockDelay(0)), try(key, engine.Shared))
	kv := newClient(t, addr).KV()
	if keys, _, err := kv.Keys(e.KeyDir(key), "", nil); err != nil || len(keys) == 0 {
		t.Fatalf("nothing to delete under %s: %v (%v)", e.KeyDir(key), keys, err)
	}
	if _, err := kv.DeleteTree(e.KeyDir(key), nil); err != nil {
		t.Fatal(err)
	}
	if keys, _, err := kv.Keys(e.KeyDir(key), "", nil); err != nil || len(keys) != 0 {
		t.Fatalf("after the delete: %v (%v)", keys, err)
	}
	cycles(t, e, key, 3, max(last, held.Token()))
}

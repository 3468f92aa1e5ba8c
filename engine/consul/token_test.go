package consul_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// The tests of this file check DESIGN.md's contract 5 on Consul: a key's
// token (the value its grant wrote to the key's fencing counter) is above
// every token granted before, after the client restarts, after every
// server of a cluster is killed with SIGKILL and restarted from its data
// directory, after a cluster's leader is killed, and after the key's
// folder is deleted. token_devagent_test.go has the losses the counter's
// clock floor covers: a dev agent restarted empty, an older snapshot
// restored.

// restartWait bounds the retries of a grant while servers restart or
// elect.
const restartWait = 60 * time.Second

// retry bounds the grants of this file's tests (see enginetest.Retry).
var retry = enginetest.Retry{Within: restartWait, Attempt: 10 * time.Second, Pause: 100 * time.Millisecond}

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
	return retry.Cycles(t, e, try(key, engine.Exclusive), n, after)
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
	t.Logf("token before the kill %d, after the restart %d", last, after)
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
	t.Logf("token under server %d %d, under server %d %d", old+1, last, now+1, after)
}

// TestTokensAfterTreeDeleted: grants, then another engine takes a shared
// lease, and the key's whole KV folder (its document, the holder's
// contender key and the fencing counter) is deleted under it, as an
// operator who wipes the store would; the next grants continue above every
// token before: the counter starts again from the clock.
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

// countingTransport counts the KV and transaction requests that go
// through it to the agent (not the session's renewals and watches).
type countingTransport struct {
	n    *atomic.Int64
	base http.RoundTripper
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasPrefix(r.URL.Path, "/v1/kv/") || r.URL.Path == "/v1/txn" {
		c.n.Add(1)
	}
	return c.base.RoundTrip(r)
}

// TestUncontendedGrantIsOneRequest: once an engine has granted a key, its
// next uncontended exclusive grant of the key is one request, the grant's
// transaction, as without a fencing counter: the engine remembers the
// counter its last grant wrote. When another engine granted the key in
// between, the remembered counter is stale: the grant's check fails, and
// the engine reads the key and grants above the other engine's token.
func TestUncontendedGrantIsOneRequest(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	var n atomic.Int64
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = addr
	cfg.HttpClient = &http.Client{Transport: countingTransport{&n, cfg.Transport}}
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := consul.New(c, consul.WithPrefix(testPrefix), consul.WithLockDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	key := testKey(t)
	last := cycles(t, e, key, 1, 0)
	n.Store(0)
	l := mustAcquire(t, e, try(key, engine.Exclusive))
	if got := n.Load(); got != 1 {
		t.Errorf("the second grant of %s made %d KV requests, want 1", key, got)
	}
	if l.Token() <= last {
		t.Errorf("token %d after %d", l.Token(), last)
	}
	if err := l.Release(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	other := cycles(t, newEngine(t, addr, consul.WithLockDelay(0)), key, 1, l.Token())
	cycles(t, e, key, 2, other)
}

package zookeeper_test

import (
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestTokenIsCzxid checks Token against the czxid the server reports for the
// holder's node, for grants on a quiet queue (after the first, read off the
// lock node's pzxid, as this engine was the key's last user) and for a
// waiter behind a holder and another waiter that left, whose parent's
// cversion and pzxid have moved on since its create (asked for directly).
func TestTokenIsCzxid(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	nodes := make(chan string, 8)
	gate := make(chan struct{}, 8) // lets a queued acquisition go on to its first listing
	e := dial(t, addr, zookeeper.WithBasePath(base), zookeeper.WithHooks(func(p string) {
		nodes <- p
		<-gate
	}, nil, nil))
	other := dial(t, addr, zookeeper.WithBasePath(base))
	check := func(token uint64, node string) {
		t.Helper()
		_, st, err := admin.Exists(node)
		if err != nil {
			t.Fatal(err)
		}
		if token != uint64(st.Czxid) {
			t.Errorf("Token() = %d, czxid of %s = %d", token, node, st.Czxid)
		}
	}
	for range 3 {
		gate <- struct{}{}
		l := mustAcquire(t, e, hold("tok"))
		check(l.Token(), <-nodes)
		if err := l.Release(bounded(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.MarkHits(); n != 2 {
		t.Errorf("%d of the 2 repeat grants on a quiet queue took the pzxid shortcut", n)
	}
	holder := mustAcquire(t, other, hold("tok"))
	got := make(chan queuedResult, 1)
	go func() {
		l, err := e.Acquire(bounded(t, time.Minute), hold("tok"))
		got <- queuedResult{l: l, err: err}
	}()
	node := <-nodes
	// A TryLock after our create, before our first listing, creates and
	// deletes a node: the parent's cversion and pzxid move on.
	if _, err := other.Acquire(bounded(t, 30*time.Second), try("tok")); err == nil {
		t.Fatal("TryLock on a held key succeeded")
	}
	gate <- struct{}{}
	if err := holder.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	var r queuedResult
	select {
	case r = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("waiter not granted")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	check(r.l.Token(), node)
	if n := e.MarkHits(); n != 2 {
		t.Errorf("the waiter took the pzxid shortcut although others changed the queue (hits %d, want 2)", n)
	}
	if r.l.Token() <= holder.Token() {
		t.Errorf("waiter token %d not above holder's %d", r.l.Token(), holder.Token())
	}
}

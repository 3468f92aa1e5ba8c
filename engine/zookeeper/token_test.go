package zookeeper_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
	"github.com/go-zookeeper/zk"
)

// TestTokenIsCzxid checks Token against the czxid the server reports for the
// holder's node: for grants on an empty queue, which take the token from
// the create's own reply and need no listing, and for a waiter behind a
// holder and another client's TryLock, which has to list the queue but
// still asks nothing more for its token.
func TestTokenIsCzxid(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	nodes := make(chan string, 8)
	gate := make(chan struct{}, 8) // lets a queued acquisition go on to its first listing
	e := dial(t, addr, zookeeper.WithPrefix(base), zookeeper.WithHooks(func(p string) {
		nodes <- p
		<-gate
	}, nil, nil))
	other := dial(t, addr, zookeeper.WithPrefix(base))
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
	for _, key := range []string{"tok", "tok", "tok", "tok2"} {
		gate <- struct{}{}
		l := mustAcquire(t, e, hold(key))
		check(l.Token(), <-nodes)
		if err := l.Release(bounded(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.Listings(); n != 0 {
		t.Errorf("4 grants on empty queues listed a queue %d times, want 0", n)
	}
	holder := mustAcquire(t, other, hold("tok"))
	got := make(chan queuedResult, 1)
	go func() {
		l, err := e.Acquire(bounded(t, time.Minute), hold("tok"))
		got <- queuedResult{l: l, err: err}
	}()
	node := <-nodes
	// A TryLock after our create, before our first listing, creates and
	// deletes a node: the lock node's mzxid, pzxid and cversion move on.
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
	if e.Listings() == 0 {
		t.Error("a waiter behind a holder was granted without listing the queue")
	}
	if n := e.ExistsCalls(); n != 0 {
		t.Errorf("the engine asked for %d czxids with Exists; every create's reply carried it", n)
	}
	if r.l.Token() <= holder.Token() {
		t.Errorf("waiter token %d not above holder's %d", r.l.Token(), holder.Token())
	}
}

// lostReply is a real connection whose multi (the create of a queue node)
// goes through to the server but, the first time, reports its reply lost,
// as when the connection drops just after the request was sent.
type lostReply struct {
	*zk.Conn
	lost atomic.Bool
}

func (c *lostReply) Multi(ops ...any) ([]zk.MultiResponse, error) {
	res, err := c.Conn.Multi(ops...)
	if err == nil && c.lost.CompareAndSwap(false, true) {
		return nil, zk.ErrConnectionClosed
	}
	return res, err
}

// TestTokenAfterLostCreateReply: an engine whose create reply was lost finds
// its node by its GUID instead of making a second one, and reads the czxid
// for the token with Exists, as the reply that carried it is gone.
func TestTokenAfterLostCreateReply(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	conn, events, err := zk.Connect([]string{addr}, testTimeout, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	nodes := make(chan string, 2)
	lr := &lostReply{Conn: conn}
	e, err := zookeeper.New(lr, events, zookeeper.WithPrefix(base),
		zookeeper.WithHooks(func(p string) { nodes <- p }, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	l := mustAcquire(t, e, hold("lost"))
	if !lr.lost.Load() {
		t.Fatal("the create's reply was never dropped")
	}
	node := <-nodes
	parent := base + "/" + zookeeper.EncodeKey("lost")
	if kids := children(t, admin, parent); len(kids) != 1 {
		t.Fatalf("queue after a lost create reply = %v, want the one node", kids)
	}
	_, st, err := admin.Exists(node)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != uint64(st.Czxid) {
		t.Errorf("Token() = %d, czxid of %s = %d", l.Token(), node, st.Czxid)
	}
	if n := e.ExistsCalls(); n != 1 {
		t.Errorf("Exists calls for the token = %d, want 1", n)
	}
	if err := l.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
}

package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestReconnectWithRequestsQueued cuts an engine's connection again and
// again while it has thousands of watches set and requests keep coming, so
// that each time the session comes back on a new connection, requests
// queued during the cut are answered while go-zookeeper sets the watches
// again. Run under -race (as make test runs it), it fails on go-zookeeper's
// unguarded lastZxid (its receive loop writes it, sendSetWatches reads it)
// unless the engine's connection holds those answers back until the
// watches are set (wire.go). It also checks that the session, requests and
// a watch still work after the cuts.
func TestReconnectWithRequestsQueued(t *testing.T) {
	const watches, rounds = 20000, 4
	srv := testenv.StartZooKeeper(t)
	px := newProxy(t, srv.Addr)
	hook, sess := sessionEvents()
	e := dialTimeout(t, px.addr(), 8*time.Second, hook)
	waitSession(t, sess, true, 20*time.Second)

	// Many watches on long paths make go-zookeeper's setting them again
	// long, and it reads lastZxid for each 128 KiB of paths, so the
	// answers to the queued requests come back while it runs.
	wctx, unwatch := context.WithCancel(context.Background())
	defer unwatch()
	var (
		armed   sync.WaitGroup
		watched <-chan struct{}
	)
	for w := range 8 {
		armed.Add(1)
		go func() {
			defer armed.Done()
			for i := w; i < watches; i += 8 {
				ch, err := e.Watch(wctx, watchKey(i))
				if err != nil {
					t.Errorf("watch %d: %v", i, err)
					return
				}
				if i == 7 {
					watched = ch
				}
			}
		}()
	}
	armed.Wait()
	if t.Failed() {
		return
	}

	ctx, stop := context.WithCancel(context.Background())
	var pingers sync.WaitGroup
	for range 8 {
		pingers.Add(1)
		go func() {
			defer pingers.Done()
			for i := 0; i < 100000 && ctx.Err() == nil; i++ {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_ = e.Ping(pctx)
				cancel()
			}
		}()
	}
	defer func() { stop(); pingers.Wait() }()

	for round := range rounds {
		px.partition()
		waitSession(t, sess, false, 10*time.Second)
		time.Sleep(100 * time.Millisecond) // requests queue up
		px.heal()
		waitSession(t, sess, true, 10*time.Second)
		if err := e.Ping(bounded(t, 5*time.Second)); err != nil {
			t.Fatalf("round %d: ping after the session came back: %v", round, err)
		}
	}
	stop()
	pingers.Wait()

	// The watch still tells of a change made after the cuts. (Each cut
	// sent one notification already: drain them.)
	for drained := false; !drained; {
		select {
		case <-watched:
		case <-time.After(time.Second):
			drained = true
		}
	}
	other := dialTimeout(t, srv.Addr, 8*time.Second)
	l := mustAcquire(t, other, hold(watchKey(7)))
	select {
	case <-watched:
	case <-time.After(10 * time.Second):
		t.Error("no notification within 10s of a grant of a watched key after the cuts")
	}
	if err := l.Release(bounded(t, 10*time.Second)); err != nil {
		t.Errorf("release: %v", err)
	}
}

// watchKey is the i-th key TestReconnectWithRequestsQueued watches: long,
// as keys go.
func watchKey(i int) string {
	return fmt.Sprintf("resume/%0400d", i)
}

// TestDialerHoldsNothingWithoutWatches checks NewDialer's record of a
// connection's watches where go-zookeeper sends no SetWatches on a resumed
// session: after every watch has fired, and on the new session after an
// expiry. Were the dialer to think watches were left, it would hold the
// first answer back until go-zookeeper's read deadline and the connection
// would drop; the test asks for an answer within a second instead.
func TestDialerHoldsNothingWithoutWatches(t *testing.T) {
	srv := testenv.StartZooKeeper(t)
	px := newProxy(t, srv.Addr)
	const timeout = 4 * time.Second
	c, events, err := zk.Connect([]string{px.addr()}, timeout, zk.WithLogger(quiet{}),
		zk.WithDialer(zookeeper.NewDialer()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	states := make(chan zk.State, 64)
	go func() {
		for ev := range events {
			if ev.Type == zk.EventSession {
				states <- ev.State
			}
		}
	}()
	waitState := func(want zk.State, limit time.Duration) {
		t.Helper()
		deadline := time.After(limit)
		for {
			select {
			case s := <-states:
				if s == want {
					return
				}
			case <-deadline:
				t.Fatalf("no %v within %v", want, limit)
			}
		}
	}
	answers := func(what string) {
		t.Helper()
		start := time.Now()
		if _, _, err := c.Exists("/"); err != nil {
			t.Fatalf("%s: exists: %v", what, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: the first answer took %v", what, d)
		}
	}
	waitState(zk.StateHasSession, 20*time.Second)
	other := rawConn(t, srv.Addr)
	base := testBase(t, other)
	dir, data, missing := base+"/dir", base+"/dir/data", base+"/dir/missing"
	for _, p := range []string{base[:strings.LastIndex(base, "/")], base, dir, data} {
		if _, err := other.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", p, err)
		}
	}

	// Every kind of watch go-zookeeper keeps, then a change that fires
	// them all.
	var fired []<-chan zk.Event
	_, _, ch, err := c.GetW(data)
	fired = append(fired, ch)
	if err == nil {
		_, _, ch, err = c.ExistsW(data)
		fired = append(fired, ch)
	}
	if err == nil {
		_, _, ch, err = c.ExistsW(missing)
		fired = append(fired, ch)
	}
	if err == nil {
		_, _, ch, err = c.ChildrenW(dir)
		fired = append(fired, ch)
	}
	if err != nil {
		t.Fatalf("setting the watches: %v", err)
	}
	if _, err := other.Set(data, []byte("x"), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(missing, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	for i, ch := range fired {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("watch %d did not fire", i)
		}
	}
	px.partition()
	waitState(zk.StateDisconnected, 10*time.Second)
	px.heal()
	waitState(zk.StateHasSession, 10*time.Second)
	answers("resumed session, every watch fired")

	// A watch left, then the session expires behind a partition: on the
	// new session go-zookeeper has dropped it.
	if _, _, _, err := c.ExistsW(base + "/never"); err != nil {
		t.Fatal(err)
	}
	sid := c.SessionID()
	px.partition()
	waitState(zk.StateDisconnected, 10*time.Second)
	time.Sleep(2 * timeout)
	px.heal()
	waitState(zk.StateExpired, 20*time.Second)
	waitState(zk.StateHasSession, 20*time.Second)
	if c.SessionID() == sid {
		t.Fatalf("the session did not expire")
	}
	answers("new session after an expiry")
}

// TestWaiterOutlastsCuts cuts a waiting request's connection three times
// while its session lives, each time with a listing of the waiter's in
// flight (the proxy stalls first, and the waiter lists every 5ms): the
// wait goes on, and the waiter is granted once the holder releases, with a
// larger token.
func TestWaiterOutlastsCuts(t *testing.T) {
	srv := testenv.StartZooKeeper(t)
	px := newProxy(t, srv.Addr)
	sess := make(chan bool, 64)
	watching := make(chan string, 64)
	a := dialTimeout(t, px.addr(), 8*time.Second, zookeeper.WithRecheck(5*time.Millisecond),
		zookeeper.WithHooks(nil,
			func(p string) {
				select {
				case watching <- p:
				default:
				}
			},
			func(up bool) {
				select {
				case sess <- up:
				default:
				}
			}))
	waitSession(t, sess, true, 20*time.Second)
	b := dialTimeout(t, srv.Addr, 8*time.Second)
	held := mustAcquire(t, b, hold("outlast/x"))

	type grant struct {
		l   engine.Lease
		err error
	}
	got := make(chan grant, 1)
	go func() {
		l, err := a.Acquire(bounded(t, time.Minute), hold("outlast/x"))
		got <- grant{l, err}
	}()
	select {
	case <-watching:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter set no watch within 20s")
	}
	for round := range 3 {
		px.stall()
		time.Sleep(100 * time.Millisecond) // a listing goes out and waits
		px.partition()
		waitSession(t, sess, false, 10*time.Second)
		time.Sleep(300 * time.Millisecond)
		px.heal()
		waitSession(t, sess, true, 10*time.Second)
		select {
		case g := <-got:
			t.Fatalf("cut %d ended the wait: %v, %v", round, g.l, g.err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := held.Release(bounded(t, 10*time.Second)); err != nil {
		t.Fatalf("release: %v", err)
	}
	select {
	case g := <-got:
		if g.err != nil {
			t.Fatalf("the waiter after three cuts: %v", g.err)
		}
		if g.l.Token() <= held.Token() {
			t.Errorf("token %d after %d, want it larger", g.l.Token(), held.Token())
		}
		if err := g.l.Release(bounded(t, 10*time.Second)); err != nil {
			t.Errorf("release of the waiter's lease: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not granted within 20s of the release")
	}
}

// TestUnansweredConnectIsCut: a reconnecting engine whose first connection
// is accepted and never answered (as ZooKeeper 3.8.0 does with a
// connection that comes in while it starts) tries again within a third of
// its session timeout, not after go-zookeeper's ten receive timeouts
// (60s here): its session, and the lease in it, survive.
func TestUnansweredConnectIsCut(t *testing.T) {
	srv := testenv.StartZooKeeper(t)
	px := newProxy(t, srv.Addr)
	const timeout = 9 * time.Second
	hook, sess := sessionEvents()
	a := dialTimeout(t, px.addr(), timeout, hook)
	l := mustAcquire(t, a, hold("mute/x"))
	sid := a.SessionID()
	waitSession(t, sess, true, time.Second)
	px.mute()
	waitSession(t, sess, false, 5*time.Second)
	for deadline := time.Now().Add(5 * time.Second); px.mutedConns() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the engine did not connect again within 5s")
		}
	}
	px.heal()                                 // the engine's connection is muted; the next one is answered
	waitSession(t, sess, true, 7*time.Second) // a third of the timeout, a second's pause, a connect
	if err := l.Err(); err != nil {
		t.Fatalf("the lease ended across an unanswered connect: %v", err)
	}
	if got := a.SessionID(); got != sid {
		t.Errorf("session %x after the unanswered connect, want %x resumed", got, sid)
	}
	if err := l.Release(bounded(t, 10*time.Second)); err != nil {
		t.Fatalf("release after the unanswered connect: %v", err)
	}
}

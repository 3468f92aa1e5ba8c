package zookeeper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// hold is a waiting, renewed exclusive request.
func hold(key string) engine.Request {
	return engine.Request{Key: key, Mode: engine.Exclusive, TTL: time.Minute, Renew: true, Wait: true}
}

// try is hold without waiting.
func try(key string) engine.Request {
	r := hold(key)
	r.Wait = false
	return r
}

// bounded returns a context that ends after d, cancelled with the test.
func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dialTimeout makes an engine with session timeout d on addr.
func dialTimeout(t *testing.T, addr string, d time.Duration, opts ...zookeeper.Option) *zookeeper.Engine {
	t.Helper()
	e, err := zookeeper.Dial([]string{addr}, append([]zookeeper.Option{zookeeper.WithSessionTimeout(d),
		zookeeper.WithLogger(quiet{})}, opts...)...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// sessionEvents returns a hook option and the channel it reports on.
func sessionEvents() (zookeeper.Option, <-chan bool) {
	ch := make(chan bool, 64)
	return zookeeper.WithHooks(nil, nil, func(up bool) {
		select {
		case ch <- up:
		default:
		}
	}), ch
}

// waitSession waits for a session event with the given state.
func waitSession(t *testing.T, ch <-chan bool, up bool, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case got := <-ch:
			if got == up {
				return
			}
		case <-deadline:
			t.Fatalf("no session event up=%v within %v", up, limit)
		}
	}
}

func mustAcquire(t *testing.T, e engine.Engine, req engine.Request) engine.Lease {
	t.Helper()
	l, err := e.Acquire(bounded(t, 30*time.Second), req)
	if err != nil {
		t.Fatalf("acquire %q: %v", req.Key, err)
	}
	return l
}

func waitDone(t *testing.T, l engine.Lease, limit time.Duration, what string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(limit):
		t.Fatalf("%s: Done() of %q did not close within %v", what, l.Key(), limit)
	}
}

func isDone(l engine.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

// TestShortOutageKeepsLeases kills the server and restarts it well within
// the session timeout: the session comes back and the leases with it. (The
// engine reaches the server through a proxy kept cut until the restarted
// server serves; see TestRestartAfterLossDeletesOrphans.)
func TestShortOutageKeepsLeases(t *testing.T) {
	srv := testenv.StartZooKeeper(t)
	px := newProxy(t, srv.Addr)
	// Long enough that a loaded machine restarts the server in time.
	const timeout = 20 * time.Second
	hook, sess := sessionEvents()
	a := dialTimeout(t, px.addr(), timeout, hook)
	l := mustAcquire(t, a, hold("short/x"))
	r := mustAcquire(t, a, engine.Request{Key: "short/r", Mode: engine.Shared, TTL: time.Minute, Renew: true})
	sid := a.SessionID()

	waitSession(t, sess, true, time.Second) // the first session, reported before the grant
	srv.Kill()
	px.partition()
	waitSession(t, sess, false, 30*time.Second)
	if a.Connected() {
		t.Errorf("Connected() = true after the server was killed")
	}
	srv.Restart()
	px.heal()
	waitSession(t, sess, true, 30*time.Second)

	for _, le := range []engine.Lease{l, r} {
		if isDone(le) || le.Err() != nil {
			t.Fatalf("lease %q did not survive a short outage: %v", le.Key(), le.Err())
		}
	}
	if got := a.SessionID(); got != sid {
		t.Errorf("session id %x after reconnect, want the same session %x", got, sid)
	}
	b := dialTimeout(t, srv.Addr, timeout)
	if _, err := b.Acquire(bounded(t, 30*time.Second), try("short/x")); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("TryLock on a key held across the outage: want ErrNotAcquired, got %v", err)
	}
	if err := l.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatalf("release after reconnect: %v", err)
	}
	if err := r.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatalf("release after reconnect: %v", err)
	}
	next := mustAcquire(t, b, hold("short/x"))
	if next.Token() <= l.Token() {
		t.Errorf("next token %d, want > %d", next.Token(), l.Token())
	}
}

// TestLongOutageLosesLeases freezes the server (SIGSTOP) for longer than
// the session timeout: every lease is lost at once, by the local timer,
// while the server cannot say anything; after the server is back the next
// holder has a larger token and a stale release changes nothing.
func TestLongOutageLosesLeases(t *testing.T) {
	srv := testenv.StartZooKeeper(t)
	const timeout = 4 * time.Second
	a := dialTimeout(t, srv.Addr, timeout)
	lost := make(chan error, 4)
	req := hold("long/x")
	req.OnLost = func(err error) { lost <- err }
	l := mustAcquire(t, a, req)
	rreq := engine.Request{Key: "long/r", Mode: engine.Shared, TTL: time.Minute, Renew: true, OnLost: req.OnLost}
	r := mustAcquire(t, a, rreq)

	srv.Pause()
	waitDone(t, l, 4*timeout, "frozen server")
	waitDone(t, r, 4*timeout, "frozen server")
	if a.Connected() {
		t.Errorf("Connected() = true while the server is frozen and the leases are lost")
	}
	for _, le := range []engine.Lease{l, r} {
		if !errors.Is(le.Err(), engine.ErrLeaseLost) {
			t.Errorf("lease %q: Err() = %v, want ErrLeaseLost", le.Key(), le.Err())
		}
	}
	for range 2 {
		select {
		case err := <-lost:
			if !errors.Is(err, engine.ErrLeaseLost) {
				t.Errorf("OnLost(%v), want ErrLeaseLost", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("OnLost was not called for both leases")
		}
	}
	srv.Resume()

	b := dialTimeout(t, srv.Addr, timeout)
	next := mustAcquire(t, b, hold("long/x"))
	if next.Token() <= l.Token() {
		t.Errorf("token after the loss %d, want > %d", next.Token(), l.Token())
	}
	if err := l.Release(bounded(t, 30*time.Second)); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("release of a lost lease: want ErrNotHeld, got %v", err)
	}
	if next.Err() != nil {
		t.Errorf("the new holder lost its lease to a stale release: %v", next.Err())
	}
	again := mustAcquire(t, a, hold("long/y"))
	if err := again.Release(bounded(t, 30*time.Second)); err != nil {
		t.Errorf("release after the outage: %v", err)
	}
}

// TestPartitionExpiresSession cuts one client off a live server for longer
// than the session timeout. The server expires the session and grants the
// key to a waiter; by then the cut-off holder must already have given its
// lease up (no overlap), and once the partition heals the engine works on a
// fresh session.
func TestPartitionExpiresSession(t *testing.T) {
	srv := testenv.StartZooKeeper(t)
	px := newProxy(t, srv.Addr)
	const timeout = 4 * time.Second
	hook, sess := sessionEvents()
	a := dialTimeout(t, px.addr(), timeout, hook)
	b := dialTimeout(t, srv.Addr, timeout)
	l := mustAcquire(t, a, hold("part/x"))
	sid := a.SessionID()
	waitSession(t, sess, true, time.Second) // the first session, reported before the grant

	type grant struct {
		l         engine.Lease
		err       error
		holderOut bool // the old holder's Done had closed at the grant
	}
	got := make(chan grant, 1)
	go func() {
		nl, err := b.Acquire(bounded(t, 60*time.Second), hold("part/x"))
		got <- grant{nl, err, isDone(l)}
	}()
	// A waiter cut off too, behind b's holder of another key, listing
	// every 5ms so that it reads during the partition: its wait outlasts
	// a dropped connection, but not the session.
	queued := make(chan string, 1)
	w := dialTimeout(t, px.addr(), timeout, zookeeper.WithRecheck(5*time.Millisecond),
		zookeeper.WithHooks(func(p string) {
			select {
			case queued <- p:
			default:
			}
		}, nil, nil))
	other := mustAcquire(t, b, hold("part/y"))
	defer func() { _ = other.Release(bounded(t, 10*time.Second)) }()
	waited := make(chan error, 1)
	go func() {
		wl, err := w.Acquire(context.Background(), hold("part/y"))
		if err == nil {
			_ = wl.Release(bounded(t, 10*time.Second))
		}
		waited <- err
	}()
	select {
	case <-queued:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not queue within 20s")
	}
	px.partition()
	var g grant
	select {
	case g = <-got:
	case <-time.After(60 * time.Second):
		t.Fatalf("the waiter was not granted after the holder's session expired")
	}
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	if !g.holderOut {
		t.Errorf("the server granted the key to another client while the cut-off holder still reported its lease")
	}
	if !errors.Is(l.Err(), engine.ErrLeaseLost) {
		t.Errorf("cut-off lease Err() = %v, want ErrLeaseLost", l.Err())
	}
	if g.l.Token() <= l.Token() {
		t.Errorf("token after expiry %d, want > %d", g.l.Token(), l.Token())
	}
	select {
	case err := <-waited:
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("the cut-off waiter: %v, want ErrUnavailable", err)
		}
	case <-time.After(2 * timeout):
		t.Errorf("the cut-off waiter still waits %v after its session was lost", 2*timeout)
	}
	px.heal()
	waitSession(t, sess, true, 30*time.Second)
	if a.SessionID() == sid {
		t.Errorf("after expiry the engine still uses session %x", sid)
	}
	if err := g.l.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatalf("release: %v", err)
	}
	again := mustAcquire(t, a, try("part/x"))
	if again.Token() <= g.l.Token() {
		t.Errorf("token on the new session %d, want > %d", again.Token(), g.l.Token())
	}
	if err := again.Release(bounded(t, 30*time.Second)); err != nil {
		t.Errorf("release on the new session: %v", err)
	}
}

// TestRestartAfterLossDeletesOrphans kills the server for longer than the
// session timeout, then restarts it. The server restores the session, so
// the engine gets it back, and deletes the nodes of the leases it had given
// up: the key is free at once for the next holder, not after another
// session timeout.
//
// The client reaches the server through a proxy that stays cut until the
// restarted server serves: go-zookeeper waits long for a connect reply, and
// a connect that lands on a server still starting could outlast the
// restored session.
func TestRestartAfterLossDeletesOrphans(t *testing.T) {
	srv := testenv.StartZooKeeper(t)
	px := newProxy(t, srv.Addr)
	const timeout = 6 * time.Second
	hook, sess := sessionEvents()
	a := dialTimeout(t, px.addr(), timeout, hook)
	l := mustAcquire(t, a, hold("orphan/x"))
	sid := a.SessionID()
	waitSession(t, sess, true, time.Second) // the first session, reported before the grant
	srv.Kill()
	px.partition()
	waitDone(t, l, 4*timeout, "killed server")
	srv.Restart()
	px.heal()
	waitSession(t, sess, true, 30*time.Second)
	if a.SessionID() != sid {
		t.Fatalf("the restarted server did not restore session %x (got %x); this test needs it", sid, a.SessionID())
	}
	// The session lives, so only the engine can have removed the node.
	admin := rawConn(t, srv.Addr)
	parent := a.Prefix() + "/" + zookeeper.EncodeKey("orphan/x")
	for deadline := time.Now().Add(20 * time.Second); ; {
		if len(children(t, admin, parent)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lost lease's node is still there: %v", children(t, admin, parent))
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := dialTimeout(t, srv.Addr, timeout)
	next := mustAcquire(t, b, try("orphan/x"))
	if next.Token() <= l.Token() {
		t.Errorf("token after the loss %d, want > %d", next.Token(), l.Token())
	}
}

// TestReleaseDuringOutage releases while the connection is cut: the release
// cannot complete, so it fails as unavailable and the lease ends as lost
// (it can no longer be said to hold). When the same session is back the
// engine deletes the node, and the key is free.
func TestReleaseDuringOutage(t *testing.T) {
	srv := testenv.StartZooKeeper(t)
	px := newProxy(t, srv.Addr)
	const timeout = 20 * time.Second
	hook, sess := sessionEvents()
	a := dialTimeout(t, px.addr(), timeout, hook)
	l := mustAcquire(t, a, hold("rel/x"))
	sid := a.SessionID()
	waitSession(t, sess, true, time.Second) // the first session, reported before the grant

	px.partition()
	waitSession(t, sess, false, 30*time.Second)
	err := l.Release(bounded(t, 3*time.Second))
	var op *engine.OpError
	if !errors.As(err, &op) || !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("release while cut off: want an OpError wrapping ErrUnavailable, got %v", err)
	}
	if !isDone(l) || !errors.Is(l.Err(), engine.ErrLeaseLost) {
		t.Fatalf("after a release that could not complete: done %v, Err() %v; want done with ErrLeaseLost", isDone(l), l.Err())
	}
	if err := l.Release(bounded(t, 3*time.Second)); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("second release: want ErrNotHeld, got %v", err)
	}

	px.heal()
	waitSession(t, sess, true, 30*time.Second)
	if a.SessionID() != sid {
		t.Fatalf("session %x after a short cut, want %x back", a.SessionID(), sid)
	}
	b := dialTimeout(t, srv.Addr, timeout)
	next := mustAcquire(t, b, hold("rel/x")) // waits for the engine's clean-up, not for expiry
	if next.Token() <= l.Token() {
		t.Errorf("next token %d, want > %d", next.Token(), l.Token())
	}
	if a.SessionID() != sid {
		t.Errorf("the key was freed by a session change, not by the engine's delete")
	}
}

// TestDialChecksOptions: Dial refuses no servers, a session timeout that is
// not positive and a relative prefix with ErrInvalidRequest, before it
// connects (the address is never dialled).
func TestDialChecksOptions(t *testing.T) {
	servers := []string{"127.0.0.1:1"}
	for name, dial := range map[string]func() (*zookeeper.Engine, error){
		"no servers":        func() (*zookeeper.Engine, error) { return zookeeper.Dial(nil) },
		"session timeout 0": func() (*zookeeper.Engine, error) { return zookeeper.Dial(servers, zookeeper.WithSessionTimeout(0)) },
		"negative timeout": func() (*zookeeper.Engine, error) {
			return zookeeper.Dial(servers, zookeeper.WithSessionTimeout(-time.Second))
		},
		"relative prefix": func() (*zookeeper.Engine, error) { return zookeeper.Dial(servers, zookeeper.WithPrefix("locks")) },
	} {
		e, err := dial()
		if !errors.Is(err, engine.ErrInvalidRequest) {
			if e != nil {
				_ = e.Close()
			}
			t.Errorf("%s: Dial = %v, want ErrInvalidRequest", name, err)
		}
	}
}

package consul_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// sessionTTL is the shortest session TTL Consul accepts; the fault tests use
// it so that a renewal interval is 5s.
const sessionTTL = 10 * time.Second

var keySeq atomic.Int64

// testKey returns a key unique to the test and the run.
func testKey(t *testing.T) string {
	return fmt.Sprintf("%s/%d-%d", t.Name(), time.Now().UnixNano(), keySeq.Add(1))
}

// newEngine returns an engine on its own client, closed when the test ends.
func newEngine(t *testing.T, addr string, opts ...consul.Option) *consul.Engine {
	t.Helper()
	opts = append([]consul.Option{consul.WithPrefix(testPrefix), consul.WithSessionTTL(sessionTTL)}, opts...)
	e, err := consul.New(newClient(t, addr), opts...)
	if err != nil {
		t.Fatalf("new engine: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, e engine.Engine, req engine.Request) engine.Lease {
	t.Helper()
	l, err := e.Acquire(ctxFor(t, 20*time.Second), req)
	if err != nil {
		t.Fatalf("acquire %q (%v): %v", req.Key, req.Mode, err)
	}
	return l
}

func hold(key string, mode engine.Mode) engine.Request {
	return engine.Request{Key: key, Mode: mode, TTL: time.Minute, Renew: true, Wait: true}
}

func try(key string, mode engine.Mode) engine.Request {
	r := hold(key, mode)
	r.Wait = false
	return r
}

func waitDone(t *testing.T, l engine.Lease, limit time.Duration, what string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(limit):
		t.Fatalf("%s: Done() of %q (%v) did not close within %v", what, l.Key(), l.Mode(), limit)
	}
}

func destroySession(t *testing.T, c *api.Client, id string) {
	t.Helper()
	if id == "" {
		t.Fatalf("engine has no session")
	}
	if _, err := c.Session().Destroy(id, nil); err != nil {
		t.Fatalf("destroy session: %v", err)
	}
}

// TestSessionDestroyedOutside: destroying the engine's session from outside
// ends every lease it backs (exclusive, shared, fixed-TTL) with
// ErrLeaseLost within one renewal interval; the engine then works on with a
// new session, and nothing is left behind.
func TestSessionDestroyedOutside(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	e := newEngine(t, addr, consul.WithLockDelay(0))
	other := newEngine(t, addr, consul.WithLockDelay(0))
	k1, k2, k3 := testKey(t), testKey(t), testKey(t)
	var lost atomic.Int64
	onLost := func(err error) {
		if errors.Is(err, engine.ErrLeaseLost) {
			lost.Add(1)
		}
	}
	r1, r2, r3 := hold(k1, engine.Exclusive), hold(k2, engine.Shared), hold(k3, engine.Exclusive)
	r1.OnLost, r2.OnLost, r3.OnLost = onLost, onLost, onLost
	r3.Renew = false // fixed TTL, longer than the test
	leases := []engine.Lease{mustAcquire(t, e, r1), mustAcquire(t, e, r2), mustAcquire(t, e, r3)}
	first := e.SessionID()

	destroySession(t, outside, first)
	for _, l := range leases {
		waitDone(t, l, sessionTTL/2, "session destroyed")
		if !errors.Is(l.Err(), engine.ErrLeaseLost) {
			t.Errorf("lease %q: Err() = %v, want ErrLeaseLost", l.Key(), l.Err())
		}
		if err := l.Release(ctxFor(t, 5*time.Second)); !errors.Is(err, engine.ErrNotHeld) {
			t.Errorf("release of a lost lease: want ErrNotHeld, got %v", err)
		}
	}
	if n := lost.Load(); n != 3 {
		t.Errorf("OnLost called %d times with ErrLeaseLost, want 3", n)
	}
	// The same engine gets a new session and the keys again; another
	// engine's writer prunes the dead reader of k2.
	l1 := mustAcquire(t, e, try(k1, engine.Exclusive))
	if id := e.SessionID(); id == "" || id == first {
		t.Errorf("session after the loss: %q, want a new one (old %q)", id, first)
	}
	if l1.Token() <= leases[0].Token() {
		t.Errorf("token after the loss %d, want > %d", l1.Token(), leases[0].Token())
	}
	w := mustAcquire(t, other, try(k2, engine.Exclusive))
	for _, l := range []engine.Lease{l1, w} {
		if err := l.Release(ctxFor(t, 5*time.Second)); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	for _, k := range []string{k1, k2, k3} {
		mustBeClean(t, outside, e, k)
	}
}

// mustBeClean fails if the agent keeps anything but the fencing counter
// under key's folder.
func mustBeClean(t *testing.T, c *api.Client, e *consul.Engine, key string) {
	t.Helper()
	keys, _, err := c.KV().Keys(e.KeyDir(key), "", nil)
	if err != nil {
		t.Fatalf("list %s: %v", e.KeyDir(key), err)
	}
	// The fencing counter stays, by design: the next grant continues above it.
	keys = slices.DeleteFunc(keys, func(k string) bool { return k == e.KeyDir(key)+"fence" })
	if len(keys) > 0 {
		t.Errorf("%q: the agent still keeps %v", key, keys)
	}
}

// TestLockDelay: after an invalidation, the keys of the session (an
// exclusive lock and a shared holder's contender) stay locked for the
// lock-delay: no reader or writer gets them before it runs out, and
// waiters get them after.
func TestLockDelay(t *testing.T) {
	const delay = 5 * time.Second
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	a := newEngine(t, addr, consul.WithLockDelay(delay))
	b := newEngine(t, addr, consul.WithLockDelay(0))
	kx, ks := testKey(t), testKey(t)
	lx := mustAcquire(t, a, hold(kx, engine.Exclusive))
	ls := mustAcquire(t, a, hold(ks, engine.Shared))

	destroyed := time.Now()
	destroySession(t, outside, a.SessionID())
	waitDone(t, lx, sessionTTL/2, "session destroyed")
	waitDone(t, ls, sessionTTL/2, "session destroyed")

	// Within the delay: refused. The checks start well inside it (the
	// loss is seen in milliseconds); one that starts late fails loudly
	// rather than passing for the wrong reason.
	if since := time.Since(destroyed); since > delay/2 {
		t.Fatalf("the loss took %v to show; the lock-delay checks need it within %v", since, delay/2)
	}
	for _, c := range []struct {
		key  string
		mode engine.Mode
	}{{kx, engine.Exclusive}, {kx, engine.Shared}, {ks, engine.Exclusive}} {
		l, err := b.Acquire(ctxFor(t, 5*time.Second), try(c.key, c.mode))
		if err == nil {
			_ = l.Release(context.Background())
			t.Errorf("%v TryLock on %q %v after the invalidation was granted inside the lock-delay", c.mode, c.key, time.Since(destroyed))
		} else if !errors.Is(err, engine.ErrNotAcquired) {
			t.Errorf("%v TryLock inside the lock-delay: want ErrNotAcquired, got %v", c.mode, err)
		}
	}
	// Waiters get in once it has run out.
	for _, key := range []string{kx, ks} {
		l := mustAcquire(t, b, hold(key, engine.Exclusive))
		// The agent measures the delay from the invalidation; allow for
		// the gap between the destroy call's start and its effect.
		if since := time.Since(destroyed); since < delay-500*time.Millisecond {
			t.Errorf("%q granted %v after the invalidation, inside the %v lock-delay", key, since, delay)
		}
		if err := l.Release(ctxFor(t, 5*time.Second)); err != nil {
			t.Fatalf("release: %v", err)
		}
		mustBeClean(t, outside, b, key)
	}
}

// TestAgentStopped: when the agent goes away, held leases are lost within
// the session TTL, and no call hangs past its context.
func TestAgentStopped(t *testing.T) {
	ag := testenv.StartConsul(t)
	e := newEngine(t, ag.Addr, consul.WithLockDelay(0))
	fresh := newEngine(t, ag.Addr)
	kx, ks := testKey(t), testKey(t)
	leases := []engine.Lease{
		mustAcquire(t, e, hold(kx, engine.Exclusive)),
		mustAcquire(t, e, hold(ks, engine.Shared)),
	}
	ag.Kill()
	for _, l := range leases {
		waitDone(t, l, sessionTTL+10*time.Second, "agent stopped")
		if !errors.Is(l.Err(), engine.ErrLeaseLost) {
			t.Errorf("lease %q: Err() = %v, want ErrLeaseLost", l.Key(), l.Err())
		}
	}
	bound := func(what string, limit time.Duration, f func(ctx context.Context) error) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		res := make(chan error, 1)
		go func() { res <- f(ctx) }()
		select {
		case err := <-res:
			return err
		case <-time.After(limit + 10*time.Second):
			t.Fatalf("%s hung past its %v context", what, limit)
			return nil
		}
	}
	for _, eng := range []*consul.Engine{e, fresh} {
		for _, wait := range []bool{false, true} {
			req := hold(testKey(t), engine.Exclusive)
			req.Wait = wait
			err := bound("Acquire", 2*time.Second, func(ctx context.Context) error {
				l, err := eng.Acquire(ctx, req)
				if l != nil {
					_ = l.Release(ctx)
				}
				return err
			})
			if err == nil || !(errors.Is(err, engine.ErrUnavailable) || errors.Is(err, engine.ErrNotAcquired)) {
				t.Errorf("Acquire (wait=%v) with the agent down: want ErrUnavailable or ErrNotAcquired, got %v", wait, err)
			}
		}
		err := bound("Ping", 2*time.Second, eng.Ping)
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("Ping with the agent down: want ErrUnavailable, got %v", err)
		}
		var op *engine.OpError
		if !errors.As(err, &op) || op.Engine != "consul" {
			t.Errorf("Ping with the agent down: want an *engine.OpError from consul, got %T %v", err, err)
		}
	}
	err := bound("Release", 2*time.Second, leases[0].Release)
	if !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("Release of a lost lease with the agent down: want ErrNotHeld, got %v", err)
	}
	_ = bound("Close", 10*time.Second, func(context.Context) error { return e.Close() })
}

// TestSessionWaitsForNodeRegistration: an agent whose node is not in the
// catalog yet (as just after it starts) refuses session creation with
// "Missing node registration". The engine's first Acquire retries until
// the node is registered instead of failing. The test takes the agent's
// node out of the catalog, checks that a session is refused, and puts the
// node back a moment after the Acquire has started.
func TestSessionWaitsForNodeRegistration(t *testing.T) {
	ag := testenv.StartConsul(t)
	admin := newClient(t, ag.Addr)
	node, err := admin.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Catalog().Deregister(&api.CatalogDeregistration{Node: node}, nil); err != nil {
		t.Fatalf("deregister node %s: %v", node, err)
	}
	if _, _, err := admin.Session().Create(&api.SessionEntry{Name: "probe"}, nil); err == nil {
		t.Fatal("a session was created for a node missing from the catalog: the test cannot tell a retry from a first success")
	}
	reg := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := admin.Catalog().Register(&api.CatalogRegistration{
			Node: node, Address: "127.0.0.1",
			Check: &api.AgentCheck{Node: node, CheckID: "serfHealth", Name: "Serf Health Status", Status: api.HealthPassing},
		}, nil)
		reg <- err
	}()
	e := newEngine(t, ag.Addr)
	l := mustAcquire(t, e, hold(testKey(t), engine.Exclusive))
	if err := <-reg; err != nil {
		t.Fatalf("register node %s again: %v", node, err)
	}
	if err := l.Release(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

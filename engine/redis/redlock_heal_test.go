package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
)

// nodesOf reports how many nodes hold l, through the optional interface
// (asserted as an anonymous interface so that this file also builds
// against an engine without it, and fails there).
func nodesOf(t *testing.T, l engine.Lease) (held, total int) {
	t.Helper()
	nc, ok := l.(interface{ Nodes() (held, total int) })
	if !ok {
		t.Fatalf("a Redlock lease (%T) does not report its nodes", l)
	}
	return nc.Nodes()
}

// holder says which engine's lease holds key on node i: "" when the key
// is free there, otherwise the value stored (a lease id, which starts with
// its node engine's id).
func holder(t *testing.T, admin *goredis.Client, r *Redlock, key string) string {
	t.Helper()
	v, err := admin.Get(context.Background(), r.nodes[0].keysOf(key).w).Result()
	if errors.Is(err, goredis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET on a node: %v", err)
	}
	return v
}

// heldBy reports whether r's lease holds key on node i.
func heldBy(t *testing.T, admins []*goredis.Client, r *Redlock, i int, key string) bool {
	t.Helper()
	return strings.HasPrefix(holder(t, admins[i], r, key), r.nodes[i].id+":")
}

// waitHeld waits until r's lease holds key on each of nodes, failing the
// test after within (a bound the caller derives from the lease's TTL).
func waitHeld(t *testing.T, admins []*goredis.Client, r *Redlock, key string, within time.Duration, nodes ...int) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		all := true
		for _, i := range nodes {
			all = all && heldBy(t, admins, r, i, key)
		}
		if all {
			return time.Since(start)
		}
		if time.Since(start) > within {
			var got []string
			for _, i := range nodes {
				got = append(got, holder(t, admins[i], r, key))
			}
			t.Fatalf("%q: nodes %v not all taken by this lease within %v; they hold %q", key, nodes, within, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// block sets a foreign holder on the given nodes, as another client's
// lease would be.
func block(t *testing.T, admins []*goredis.Client, r *Redlock, key string, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		if err := admins[i].Set(context.Background(), r.nodes[0].keysOf(key).w, "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func unblock(t *testing.T, admins []*goredis.Client, r *Redlock, key string, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		if err := admins[i].Del(context.Background(), r.nodes[0].keysOf(key).w).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// grantOnThree grants key to r on nodes 0-2 only, nodes 3 and 4 being held
// elsewhere, and returns the lease with the single-attempt request that
// took it.
func grantOnThree(t *testing.T, r *Redlock, admins []*goredis.Client, key string, ttl time.Duration) (engine.Lease, engine.Request) {
	t.Helper()
	block(t, admins, r, key, 3, 4)
	req := hold(key, ttl)
	req.Wait = false
	l, err := r.Acquire(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	return l, req
}

// TestRedlockHealsRestartedNodes: a renewed lease granted by four of five
// nodes (the fifth held elsewhere, freed right after the grant) survives
// two of its nodes restarted without persistence, one after the other,
// because renewal takes each of them again. Without healing it is lost
// after the second restart: two of its four nodes are gone.
func TestRedlockHealsRestartedNodes(t *testing.T) {
	servers, admins := redlockNodes(t)
	r := newRedlock(t, servers)
	const ttl = 600 * time.Millisecond
	key := "heal/restarts"
	block(t, admins, r, key, 4)
	req := hold(key, ttl)
	req.Wait = false
	l, err := r.Acquire(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	unblock(t, admins, r, key, 4)
	for round, i := range []int{0, 1} {
		servers[i].Restart()
		select {
		case <-l.Done():
			t.Fatalf("lease lost after restart %d (node %d), with every node up: %v", round+1, i, l.Err())
		case <-time.After(3 * ttl):
		}
	}
	waitHeld(t, admins, r, key, ttl, 0, 1, 2, 3, 4)
	if held, total := nodesOf(t, l); held != 5 || total != 5 {
		t.Fatalf("Nodes() = %d, %d; want 5, 5", held, total)
	}
}

// TestRedlockIssue186 drives go-redsync/redsync issue 186 step by step: A
// holds a majority, one of its nodes restarts empty, and B tries at once.
//
// Healed: A took the two nodes that refused its grant as soon as they were
// free, so B finds A on four of five nodes and is refused, before and
// after A takes the restarted node again. Fencing: A's nodes' counters are
// ahead of the others' (and of the clock, which every grant's token is at
// least), and after A releases, B is granted exactly
// nodes 0, 3 and 4, the restarted node and the two A never got at its
// grant; B's token must still be above A's.
func TestRedlockIssue186(t *testing.T) {
	servers, admins := redlockNodes(t)
	a, b := newRedlock(t, servers), newRedlock(t, servers)
	ctx := ctxT(t)
	const ttl = 900 * time.Millisecond
	key := "issue186/healed"
	for i := range 3 {
		if err := admins[i].Set(ctx, a.nodes[0].keysOf(key).f, ticks(time.Now())+1e9, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	la, req := grantOnThree(t, a, admins, key, ttl)
	if held, total := nodesOf(t, la); held != 3 || total != 5 {
		t.Fatalf("after a grant on nodes 0-2: Nodes() = %d, %d; want 3, 5", held, total)
	}
	unblock(t, admins, a, key, 3, 4)
	took := waitHeld(t, admins, a, key, ttl, 3, 4)
	t.Logf("A took nodes 3 and 4 %v after they were freed (re-take interval %v)", took, ttl/3)
	servers[0].Restart()
	if _, err := b.Acquire(ctx, req); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("B right after node 0 restarted empty: want ErrNotAcquired, got %v", err)
	}
	took = waitHeld(t, admins, a, key, ttl, 0)
	t.Logf("A took node 0 again %v after its restart was over", took)
	// A re-take takes the node, then raises its counter in a second step
	// (the node counts for A only after it): wait for the raise.
	for deadline := time.Now().Add(ttl); ; time.Sleep(5 * time.Millisecond) {
		c, err := admins[0].Get(ctx, a.nodes[0].keysOf(key).f).Uint64()
		if err == nil && c >= la.Token() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 0's fencing counter %v after A's re-take: %d (%v), want at least A's token %d",
				ttl, c, err, la.Token())
		}
	}
	if _, err := b.Acquire(ctx, req); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("B after A's re-take: want ErrNotAcquired, got %v", err)
	}
	if held, _ := nodesOf(t, la); held != 5 {
		t.Fatalf("A holds %d nodes, want 5", held)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	block(t, admins, a, key, 1, 2)
	lb, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(context.Background())
	if lb.Token() <= la.Token() {
		t.Fatalf("B's token %d after A's %d", lb.Token(), la.Token())
	}
}

// TestRedlockIssue186Race is the window that remains: A holds a bare
// majority (nodes 0-2; 3 and 4 refused its grant and are freed just as
// node 0 restarts empty, before A's next re-take round), and B races A for
// the restarted node. Either A wins and B is refused, or B is granted 0, 3
// and 4 and both believe they hold the lock until A's next renewal of node
// 0 finds B there; A's Done must then close within the TTL, and B's token
// must be larger than A's, since A's grant raised the counters of the nodes
// that refused it. The overlap is logged.
func TestRedlockIssue186Race(t *testing.T) {
	servers, admins := redlockNodes(t)
	a, b := newRedlock(t, servers), newRedlock(t, servers)
	ctx := ctxT(t)
	const ttl = 900 * time.Millisecond
	for round := range 6 {
		key := "issue186/race/" + string(rune('a'+round))
		la, req := grantOnThree(t, a, admins, key, ttl)
		lost := make(chan time.Time, 1)
		go func() { <-la.Done(); lost <- time.Now() }()
		servers[0].Restart()
		unblock(t, admins, a, key, 3, 4)
		restarted := time.Now()
		var lb engine.Lease
		for lb == nil && time.Since(restarted) < ttl {
			lb, _ = b.Acquire(ctx, req)
		}
		switch {
		case lb == nil:
			t.Logf("round %d: B refused for %v after the restart: A took node 0 first", round, ttl)
			_ = la.Release(ctx)
			<-lost
		default:
			granted := time.Now()
			var lostAt time.Time
			select {
			case lostAt = <-lost:
			case <-time.After(ttl):
				t.Fatalf("round %d: A still believes it holds %v after B's grant", round, ttl)
			}
			overlap := max(0, lostAt.Sub(granted))
			t.Logf("round %d: B granted %v after the restart; A and B overlapped for %v (renewal interval %v)",
				round, granted.Sub(restarted), overlap, ttl/3)
			if lb.Token() <= la.Token() {
				t.Fatalf("round %d: B's token %d, A's %d", round, lb.Token(), la.Token())
			}
			_ = lb.Release(ctx)
		}
	}
}

// TestRedlockLifetimeUnderRestarts restarts the nodes without persistence
// one after another, round the ring, one every TTL (three renewal
// intervals), and measures how long a renewed lease lives: without healing
// it is lost at the third restart; healed, it outlives all of them.
func TestRedlockLifetimeUnderRestarts(t *testing.T) {
	servers, admins := redlockNodes(t)
	r := newRedlock(t, servers)
	const ttl, restarts = 300 * time.Millisecond, 12
	key := "heal/lifetime"
	l, err := r.Acquire(ctxT(t), hold(key, ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	granted := time.Now()
	for n := range restarts {
		servers[n%len(servers)].Restart()
		select {
		case <-l.Done():
			t.Fatalf("lease lost %v after its grant, at restart %d of %d: %v", time.Since(granted), n+1, restarts, l.Err())
		case <-time.After(ttl):
		}
	}
	t.Logf("lease held through %d restarts (%v), one every %v", restarts, time.Since(granted), ttl)
	waitHeld(t, admins, r, key, ttl, 0, 1, 2, 3, 4)
}

// failRelease is a real client whose release scripts fail, as a release
// whose reply is lost does.
type failRelease struct{ *goredis.Client }

func (c failRelease) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd {
	if sha1 == releaseExclusive.Hash() {
		cmd := goredis.NewCmd(ctx)
		cmd.SetErr(errors.New("injected: release reply lost"))
		return cmd
	}
	return c.Client.EvalSha(ctx, sha1, keys, args...)
}

// TestRedlockFailedAttemptDoesNotHeal: an attempt granted by four nodes
// of five, but too late (the fifth, stopped, held it past the TTL), gives
// them back; when one of those releases fails, its node lease is lost, and
// that must not start a re-take for a lease nobody was given: no node may
// hold the key once the failed release's key has expired, and OnLost is
// never called.
func TestRedlockFailedAttemptDoesNotHeal(t *testing.T) {
	servers, admins := redlockNodes(t)
	clients := make([]Client, len(servers))
	for i, s := range servers {
		clients[i] = newClient(t, s.addr)
	}
	clients[0] = failRelease{clients[0].(*goredis.Client)}
	stopped := goredis.NewClient(&goredis.Options{Addr: servers[4].addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = stopped.Close() })
	clients[4] = stopped // answers within the node timeout, not go-redis's 3s
	const ttl = 300 * time.Millisecond
	r, err := NewRedlock(clients, WithNodeTimeout(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	key := "heal/failed-attempt"
	lost := make(chan error, 1)
	req := hold(key, ttl)
	req.Wait, req.OnLost = false, func(err error) { lost <- err }
	servers[4].Pause()
	_, err = r.Acquire(ctxT(t), req)
	servers[4].Resume()
	if err == nil {
		t.Fatal("granted although the acquisition took longer than the TTL")
	}
	select {
	case err := <-lost:
		t.Fatalf("OnLost called for a lease that was never granted: %v", err)
	case <-time.After(3 * ttl):
	}
	for i, a := range admins {
		if v := holder(t, a, r, key); v != "" {
			t.Fatalf("node %d holds %q %v after a failed attempt", i, v, 3*ttl)
		}
	}
}

// TestRedlockHealedNodesReportTheLeaseToken: a lease granted by three of
// five nodes takes the other two once they are free; they draw tokens of
// their own, later and larger, and adopt the lease's, so that a force
// release and the inventory report the lease's own token. Without the
// adoption both report the healed nodes' larger token.
func TestRedlockHealedNodesReportTheLeaseToken(t *testing.T) {
	servers, admins := redlockNodes(t)
	r := newRedlock(t, servers)
	const ttl = 900 * time.Millisecond
	for _, shared := range []bool{false, true} {
		key := fmt.Sprintf("heal/token/%v", shared)
		block(t, admins, r, key, 3, 4)
		req := hold(key, ttl)
		req.Wait = false
		if shared {
			req.Mode = engine.Shared
		}
		time.Sleep(2 * time.Millisecond) // the clock moves on: a later draw is larger
		l, err := r.Acquire(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		unblock(t, admins, r, key, 3, 4)
		if shared {
			deadline := time.Now().Add(3 * ttl)
			for held, _ := nodesOf(t, l); held != 5; held, _ = nodesOf(t, l) {
				if time.Now().After(deadline) {
					t.Fatalf("shared: held on %d nodes, not healed to 5", held)
				}
				time.Sleep(5 * time.Millisecond)
			}
		} else {
			waitHeld(t, admins, r, key, 3*ttl, 0, 1, 2, 3, 4)
		}
		inv, err := r.List(ctxT(t), key, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(inv.Keys) != 1 || len(inv.Keys[0].Holders) != 1 || inv.Keys[0].Holders[0].Token != l.Token() {
			t.Errorf("shared=%v: List = %+v; want one holder with token %d", shared, inv.Keys, l.Token())
		}
		freed, err := r.ForceRelease(ctxT(t), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(freed) != 1 || freed[0].Token != l.Token() {
			t.Errorf("shared=%v: ForceRelease = %+v; want one holder with token %d", shared, freed, l.Token())
		}
		_ = l.Release(context.Background())
	}
}

package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// redlockNodes starts five private redis-servers.
func redlockNodes(t testing.TB) ([]*privateServer, []*goredis.Client) {
	t.Helper()
	var servers []*privateServer
	var admins []*goredis.Client
	for range 5 {
		s := startServer(t)
		servers = append(servers, s)
		admins = append(admins, newClient(t, s.addr))
	}
	return servers, admins
}

func newRedlock(t testing.TB, servers []*privateServer, opts ...RedlockOption) *Redlock {
	t.Helper()
	clients := make([]Client, len(servers))
	for i, s := range servers {
		clients[i] = newClient(t, s.addr)
	}
	r, err := NewRedlock(clients, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func TestRedlockConformance(t *testing.T) {
	servers, admins := redlockNodes(t)
	probe := newRedlock(t, servers)
	// on makes a Redlock over the five servers with the client options
	// opts gives for each address.
	on := func(opts func(addr string) *goredis.Options) enginetest.Factory {
		return func() (engine.Engine, error) {
			clients := make([]Client, len(servers))
			for i, s := range servers {
				c := goredis.NewClient(opts(s.addr))
				t.Cleanup(func() { _ = c.Close() })
				clients[i] = c
			}
			return NewRedlock(clients)
		}
	}
	enginetest.Run(t, on(func(addr string) *goredis.Options {
		return &goredis.Options{Addr: addr}
	}), enginetest.Options{
		Unordered:   "Redlock waiters poll the independent nodes with a randomised pause; no queue spans them",
		Unreachable: on(func(string) *goredis.Options { return &goredis.Options{Addr: closedAddr} }),
		AccessDenied: on(func(addr string) *goredis.Options {
			return strangerOptions(goredis.Options{Addr: addr})
		}),
		Leftovers: func(ctx context.Context, key string) ([]string, error) {
			var left []string
			for i, a := range admins {
				l, err := leftovers(a, probe.nodes[i])(ctx, key)
				if err != nil {
					return nil, err
				}
				for _, k := range l {
					left = append(left, fmt.Sprintf("node %d: %s", i, k))
				}
			}
			return left, nil
		},
	})
}

// TestRedlockMajority pre-sets a conflicting holder on every subset of the
// five nodes. The lock is granted exactly when a majority is free, and an
// attempt, granted or not, leaves the other holder's keys as they were and
// none of its own.
func TestRedlockMajority(t *testing.T) {
	servers, admins := redlockNodes(t)
	r := newRedlock(t, servers)
	ctx := ctxT(t)
	for subset := range 1 << 5 {
		key := fmt.Sprintf("majority/%d", subset)
		k := r.nodes[0].keysOf(key)
		blocked := 0
		for i, a := range admins {
			if subset&(1<<i) != 0 {
				blocked++
				if err := a.Set(ctx, k.w, "someone-else", 10*time.Second).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		req := hold(key, 5*time.Second)
		req.Wait = false
		l, err := r.Acquire(ctx, req)
		wantGrant := 5-blocked >= 3
		if wantGrant != (err == nil) {
			t.Fatalf("%d of 5 nodes held elsewhere: granted=%v (err %v), want granted=%v", blocked, err == nil, err, wantGrant)
		}
		if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
			t.Fatalf("%d of 5 nodes held elsewhere: want ErrNotAcquired, got %v", blocked, err)
		}
		if l != nil {
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
		for i, a := range admins {
			v, err := a.Get(ctx, k.w).Result()
			switch {
			case subset&(1<<i) != 0 && v != "someone-else":
				t.Fatalf("subset %05b: node %d's other holder was disturbed: %q, %v", subset, i, v, err)
			case subset&(1<<i) == 0 && !errors.Is(err, goredis.Nil):
				t.Fatalf("subset %05b: node %d kept a key of ours after the attempt: %q", subset, i, v)
			}
		}
	}
}

// TestRedlockTokensAcrossMajorities grants one key many times, each time on
// a different random majority; tokens still strictly increase because each
// grant raises its nodes' counters.
func TestRedlockTokensAcrossMajorities(t *testing.T) {
	servers, admins := redlockNodes(t)
	r := newRedlock(t, servers)
	ctx := ctxT(t)
	key := "tokens/majorities"
	k := r.nodes[0].keysOf(key)
	// Skew the counters first: one node far ahead of the rest (and of the
	// clock, which every grant's token is at least: see luaFence).
	if err := admins[4].Set(ctx, k.f, ticks(time.Now())+1e9, 0).Err(); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for round := range 60 {
		// Block two random nodes, so each grant uses a different majority.
		perm := rand.Perm(5)
		for _, i := range perm[:2] {
			admins[i].Set(ctx, k.w, "someone-else", time.Minute)
		}
		req := hold(key, 5*time.Second)
		req.Wait = false
		l, err := r.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if l.Token() <= last {
			t.Fatalf("round %d: token %d after %d", round, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for _, i := range perm[:2] {
			admins[i].Del(ctx, k.w)
		}
	}
}

// TestRedlockSurvivesMinorityLoss: a renewed lease outlives the death of
// two of five nodes, and is lost when a third dies.
func TestRedlockSurvivesMinorityLoss(t *testing.T) {
	servers, _ := redlockNodes(t)
	clients := make([]Client, len(servers))
	for i, s := range servers {
		clients[i] = goredis.NewClient(&goredis.Options{Addr: s.addr, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { _ = clients[i].(*goredis.Client).Close() })
	}
	r, err := NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	const ttl = 600 * time.Millisecond
	l, err := r.Acquire(ctxT(t), hold("minority", ttl))
	if err != nil {
		t.Fatal(err)
	}
	servers[0].kill()
	servers[1].kill()
	select {
	case <-l.Done():
		t.Fatalf("lease lost with a majority of nodes alive: %v", l.Err())
	case <-time.After(3 * ttl):
	}
	servers[2].kill()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lease still held with only two of five nodes alive")
	}
	if !errors.Is(l.Err(), engine.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
}

func TestRedlockRefusesBadSetups(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		clients []Client
		opts    []RedlockOption
	}{
		{[]Client{c, c}, nil},
		{[]Client{c, c, c}, []RedlockOption{WithNodeOptions(WithFair(true))}},
		{[]Client{c, c, c}, []RedlockOption{WithNodeTimeout(0)}},
		{[]Client{c, c, c}, []RedlockOption{WithDriftFactor(0.7)}},
	} {
		if _, err := NewRedlock(tc.clients, tc.opts...); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("NewRedlock(%d nodes, %d opts): want ErrInvalidRequest, got %v", len(tc.clients), len(tc.opts), err)
		}
	}
}

// TestRedlockNodeTimeoutScalesWithTTL puts every node behind a gate that
// holds each answer back 150ms. Without WithNodeTimeout a node's answer
// is awaited for TTL/20 (at least 50ms, at most 500ms): a 10s lease is
// granted, a 1s lease is not (its nodes count as unavailable), and
// WithNodeTimeout(100ms) refuses the 10s lease as well. With answers held
// back 700ms, a 20s lease is refused: the default stops at 500ms.
func TestRedlockNodeTimeoutScalesWithTTL(t *testing.T) {
	servers, _ := redlockNodes(t)
	var gates []*gate
	clients := make([]Client, len(servers))
	for i, s := range servers {
		g := newGate(t, s.addr)
		gates = append(gates, g)
		// As config builds them: the client keeps to the engine's deadlines.
		c := goredis.NewClient(&goredis.Options{Addr: g.ln.Addr().String(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	ctx := ctxT(t)
	for _, tc := range []struct {
		name  string
		opts  []RedlockOption
		ttl   time.Duration
		delay time.Duration
		grant bool
	}{
		{"default, 10s TTL", nil, 10 * time.Second, 150 * time.Millisecond, true},
		{"default, 1s TTL", nil, time.Second, 150 * time.Millisecond, false},
		{"WithNodeTimeout(100ms), 10s TTL", []RedlockOption{WithNodeTimeout(100 * time.Millisecond)},
			10 * time.Second, 150 * time.Millisecond, false},
		// A twentieth of 20s is 1s, but the default stops at 500ms.
		{"default, 20s TTL, 700ms answers", nil, 20 * time.Second, 700 * time.Millisecond, false},
	} {
		r, err := NewRedlock(clients, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		// A first grant without delay sets up each client's connection
		// and loads the scripts, so that each node then costs one answer.
		for _, g := range gates {
			g.delay.Store(0)
		}
		warm, err := r.Acquire(ctx, once("slow-nodes/warm", time.Minute))
		if err != nil {
			t.Fatalf("%s: warm-up grant: %v", tc.name, err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for _, g := range gates {
			g.delay.Store(int64(tc.delay))
		}
		l, err := r.Acquire(ctx, once("slow-nodes/"+tc.name, tc.ttl))
		switch {
		case tc.grant && err != nil:
			t.Errorf("%s: want a grant, got %v", tc.name, err)
		case !tc.grant && err == nil:
			t.Errorf("%s: granted; want nodes that answer in %v to count as unavailable", tc.name, tc.delay)
		case !tc.grant && !errors.Is(err, engine.ErrUnavailable):
			t.Errorf("%s: want ErrUnavailable, got %v", tc.name, err)
		}
		if l != nil {
			if err := l.Release(ctx); err != nil {
				t.Errorf("%s: release: %v", tc.name, err)
			}
		}
		_ = r.Close()
	}
}

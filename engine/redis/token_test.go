package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// The tests of this file make a private server forget a key's fencing
// counter in each way DESIGN.md's contract 5 names, and check that the
// next grant's token is still above every token granted before: the
// counter starts again from the server's clock (see luaFence).

// grantOnce acquires req on e, trying again for up to ten seconds while the
// engine reports the server unavailable (it may be restarting or loading).
func grantOnce(t *testing.T, e engine.Engine, req engine.Request) engine.Lease {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var l engine.Lease
		if l, err = e.Acquire(ctxT(t), req); err == nil {
			return l
		}
		if !errors.Is(err, engine.ErrUnavailable) {
			break
		}
	}
	t.Fatalf("acquire %s: %v", req.Key, err)
	return nil
}

// cycles grants key on e n times, releasing each lease, and returns the
// largest token seen; each token must be above the one before, the first
// above after. A token that is not fails the test and ends the cycles, so
// that the checks after it still run.
func cycles(t *testing.T, e engine.Engine, key string, n int, after uint64) uint64 {
	t.Helper()
	for i := range n {
		l := grantOnce(t, e, once(key, 5*time.Second))
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if l.Token() <= after {
			t.Errorf("grant %d of %s: token %d after %d; tokens must strictly increase", i+1, key, l.Token(), after)
			return after
		}
		after = l.Token()
	}
	return after
}

// above checks that l's token, granted after what, is above last, and
// returns the larger of the two.
func above(t *testing.T, l engine.Lease, what string, last uint64) uint64 {
	t.Helper()
	if l.Token() <= last {
		t.Errorf("%s: token %d after %d; tokens must strictly increase", what, l.Token(), last)
	}
	return max(last, l.Token())
}

// counter reads key's fencing counter on c: 0 when it is gone.
func counter(t *testing.T, c goredis.Cmdable, e *Engine, key string) uint64 {
	t.Helper()
	n, err := c.Get(ctxT(t), e.keysOf(key).f).Uint64()
	if err != nil && !errors.Is(err, goredis.Nil) {
		t.Fatal(err)
	}
	return n
}

// ticks is the fencing clock at: tokenTick units since tokenEpoch.
func ticks(at time.Time) uint64 {
	return uint64(at.Sub(time.Unix(tokenEpoch, 0)).Microseconds() / tokenTick)
}

// TestTokenIsServerClock: the first grant of a key takes the server's clock
// in tokenTick units since tokenEpoch, which fits in the 48 bits a
// failover.Manager leaves to an engine's token.
func TestTokenIsServerClock(t *testing.T) {
	srv := startServer(t)
	e := mustEngine(t, newClient(t, srv.addr))
	before := ticks(time.Now())
	l := grantOnce(t, e, once("clock", 5*time.Second))
	after := ticks(time.Now())
	defer l.Release(context.Background())
	// The server runs on this machine: its clock is this one's.
	if l.Token() < before || l.Token() > after || l.Token() >= 1<<48 {
		t.Fatalf("first token %d; want the clock, between %d and %d ticks of %dµs, below 2^48", l.Token(), before, after, tokenTick)
	}
}

// TestTokensAfterRestartWithoutPersistence: 50 grants, then the server
// restarts with nothing saved; the same engine's next exclusive and shared
// grants are above the last token.
func TestTokensAfterRestartWithoutPersistence(t *testing.T) {
	srv := testenv.StartRedis(t, "--save", "", "--appendonly", "no")
	admin := newClient(t, srv.Addr)
	e := mustEngine(t, newClient(t, srv.Addr))
	last := cycles(t, e, "restart", 50, 0)
	srv.Restart()
	if c := counter(t, admin, e, "restart"); c != 0 {
		t.Fatalf("the counter survived a restart without persistence: %d", c)
	}
	last = cycles(t, e, "restart", 1, last)
	s := once("restart", 5*time.Second)
	s.Mode = engine.Shared
	srv.Restart()
	l := grantOnce(t, e, s)
	defer l.Release(context.Background())
	above(t, l, "shared grant after a second restart", last)
}

// TestTokensAfterSnapshotRestore: grants, a SAVE, more grants, a crash
// (kill -9) and a restart that loads the snapshot: the counter comes back
// stale, and the next token is still above the last one.
func TestTokensAfterSnapshotRestore(t *testing.T) {
	srv := testenv.StartRedis(t, "--dbfilename", "dump.rdb")
	admin := newClient(t, srv.Addr)
	e := mustEngine(t, newClient(t, srv.Addr))
	cycles(t, e, "snapshot", 20, 0)
	if err := admin.Save(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	last := cycles(t, e, "snapshot", 20, 0)
	srv.Kill()
	srv.Restart()
	if c := counter(t, admin, e, "snapshot"); c == 0 || c >= last {
		t.Fatalf("the counter after restoring the snapshot is %d; want the saved one, below the last token %d", c, last)
	}
	cycles(t, e, "snapshot", 1, last)
}

// TestTokensAfterFlush: FLUSHALL between grants; the next shared grant, the
// next exclusive grant and a hand-off to a waiting writer each carry a
// larger token.
func TestTokensAfterFlush(t *testing.T) {
	srv := startServer(t)
	admin := newClient(t, srv.addr)
	e := mustEngine(t, newClient(t, srv.addr))
	last := cycles(t, e, "flush", 20, 0)
	flush := func() {
		t.Helper()
		if err := admin.FlushAll(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	s := once("flush", 5*time.Second)
	s.Mode = engine.Shared
	ls := grantOnce(t, e, s)
	last = above(t, ls, "shared grant after FLUSHALL", last)
	if err := ls.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	flush()
	a := grantOnce(t, e, once("flush", 5*time.Second))
	last = above(t, a, "exclusive grant after FLUSHALL", last)
	flush()
	if err := admin.Set(ctxT(t), e.keysOf("flush").w, a.(*lease).id, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	waiter := mustEngine(t, newClient(t, srv.addr))
	got := make(chan engine.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctxT(t), hold("flush", 5*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "the writer to wait", func() bool {
		return admin.Exists(context.Background(), e.keysOf("flush").h).Val() == 1
	})
	if err := a.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		return
	}
	defer l.Release(context.Background())
	above(t, l, "hand-off after FLUSHALL", last)
}

// TestTokensAfterEviction: a server with a small maxmemory and
// allkeys-lru evicts the counter under a flood of other keys; the next
// token is above the last.
func TestTokensAfterEviction(t *testing.T) {
	srv := testenv.StartRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
	admin := newClient(t, srv.Addr)
	e := mustEngine(t, newClient(t, srv.Addr))
	last := cycles(t, e, "evict", 20, 0)
	junk := strings.Repeat("x", 1024)
	ctx := ctxT(t)
	f := e.keysOf("evict").f
	for batch := 0; ; batch++ {
		n, err := admin.Exists(ctx, f).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Logf("the counter was evicted after %d keys of 1KiB", batch*1000)
			break
		}
		if batch == 200 {
			t.Fatal("200,000 keys of 1KiB did not evict the counter")
		}
		p := admin.Pipeline()
		for i := range 1000 {
			p.Set(ctx, fmt.Sprintf("junk:%d:%d", batch, i), junk, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycles(t, e, "evict", 1, last)
}

// TestTokensAfterReplicaPromotion: a replica stops following its primary
// (promoted, as a failover would, while the old primary still grants), the
// primary grants more and dies, and an engine on the promoted replica,
// whose counter lacks the last grants, continues above them.
func TestTokensAfterReplicaPromotion(t *testing.T) {
	primary := startServer(t)
	host, port, _ := net.SplitHostPort(primary.addr)
	replica := testenv.StartRedis(t, "--replicaof", host, port)
	pc, rc := newClient(t, primary.addr), newClient(t, replica.Addr)
	waitFor(t, "the replica to link", func() bool {
		return strings.Contains(rc.Info(context.Background(), "replication").Val(), "master_link_status:up")
	})
	pe := mustEngine(t, pc)
	cycles(t, pe, "promote", 10, 0)
	if n, err := pc.Wait(ctxT(t), 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged (%v)", n, err)
	}
	if err := rc.ReplicaOf(ctxT(t), "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote the replica: %v", err)
	}
	last := cycles(t, pe, "promote", 10, 0)
	primary.kill()
	re := mustEngine(t, rc)
	if c := counter(t, rc, re, "promote"); c == 0 || c >= last {
		t.Fatalf("the promoted replica's counter is %d; want the replicated one, below the last token %d", c, last)
	}
	cycles(t, re, "promote", 1, last)
}

// TestRedlockTokensAfterMajorityRestart: three of five Redlock nodes
// restart without persistence and the other two are held by someone else,
// so the next grant is made by the restarted nodes alone; its token is
// still above the last.
func TestRedlockTokensAfterMajorityRestart(t *testing.T) {
	servers, admins := redlockNodes(t)
	r := newRedlock(t, servers)
	key := "redlock/restart"
	last := cycles(t, r, key, 20, 0)
	for _, s := range servers[:3] {
		s.Restart()
	}
	block(t, admins, r, key, 3, 4)
	cycles(t, r, key, 1, last)
}

// TestClusterTokensAfterMasterRestart: the master that owns a key's slot
// restarts without persistence (it rejoins the cluster empty); the next
// token is above the last.
func TestClusterTokensAfterMasterRestart(t *testing.T) {
	cl := testenv.StartRedisCluster(t, 3)
	e := mustEngine(t, newClusterClient(t, cl.Addrs))
	key := "cluster/restart"
	last := cycles(t, e, key, 20, 0)
	owner := -1
	for i, n := range cl.Nodes {
		if newClient(t, n.Addr).Exists(ctxT(t), e.keysOf(key).f).Val() == 1 {
			owner = i
		}
	}
	if owner < 0 {
		t.Fatal("no master has the counter")
	}
	cl.Nodes[owner].Restart()
	cycles(t, e, key, 1, last)
}

// TestTokensBeyondFourteenDigits: a counter past 10^14 (the clock gets
// there about 2050; Lua writes a number of more than 14 digits in exponent
// form) still gives exact tokens to exclusive, shared and hand-off grants,
// in the counter, the readers' holder entries and the hand-off's message.
func TestTokensBeyondFourteenDigits(t *testing.T) {
	srv := startServer(t)
	admin := newClient(t, srv.addr)
	e := mustEngine(t, newClient(t, srv.addr))
	const start = 1<<48 - 1000 // 281474976709656, 15 digits
	key := "digits"
	if err := admin.Set(ctxT(t), e.keysOf(key).f, start, 0).Err(); err != nil {
		t.Fatal(err)
	}
	want := uint64(start)
	check := func(l engine.Lease, what string) {
		t.Helper()
		want++
		if l.Token() != want {
			t.Errorf("%s: token %d, want %d", what, l.Token(), want)
		}
		if c, err := admin.Get(ctxT(t), e.keysOf(key).f).Result(); err != nil || c != fmt.Sprint(want) {
			t.Errorf("%s: counter %q (%v), want %d", what, c, err, want)
		}
		hs, err := e.Holders(ctxT(t), key)
		if err != nil || len(hs) != 1 || hs[0].Token != want {
			t.Errorf("%s: Holders = %+v, %v; want one holder with token %d", what, hs, err, want)
		}
	}
	a := grantOnce(t, e, once(key, 5*time.Second))
	check(a, "exclusive grant")
	got := make(chan engine.Lease, 1)
	go func() {
		l, err := mustEngine(t, newClient(t, srv.addr)).Acquire(ctxT(t), hold(key, 5*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "the writer to wait", func() bool {
		return admin.Exists(context.Background(), e.keysOf(key).h).Val() == 1
	})
	if err := a.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if l := <-got; l != nil {
		check(l, "hand-off")
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	s := once(key, 5*time.Second)
	s.Mode = engine.Shared
	r := grantOnce(t, e, s)
	defer r.Release(context.Background())
	check(r, "shared grant")
}

// gate is a TCP proxy of a test's own between a client (or a replica) and
// a server: while it is shut, what the server sends is dropped, so a
// replica falls behind without knowing it; with a delay, each answer is
// held back that long, as a slow network would.
type gate struct {
	ln    net.Listener
	shut  atomic.Bool
	delay atomic.Int64 // nanoseconds each answer is held back
}

// newGate listens on loopback and forwards every connection to backend
// until the test ends.
func newGate(t *testing.T, backend string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln}
	var conns []net.Conn
	var mu sync.Mutex
	closed := false
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", backend)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				_, _ = c.Close(), s.Close()
				return
			}
			conns = append(conns, c, s)
			mu.Unlock()
			go func() { _, _ = io.Copy(s, c) }()
			go g.forward(c, s)
		}
	}()
	return g
}

// forward copies from src to dst, dropping what arrives while the gate is
// shut and holding back what it passes for the gate's delay.
func (g *gate) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if d := time.Duration(g.delay.Load()); n > 0 && d > 0 {
			time.Sleep(d)
		}
		if n > 0 && !g.shut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

// TestSentinelTokensAfterFailover: Sentinel promotes a replica that missed
// the primary's last grants (its replication link drops them); the next
// grant through Sentinel, on the promoted replica, is above them.
func TestSentinelTokensAfterFailover(t *testing.T) {
	primary := startServer(t)
	g := newGate(t, primary.addr)
	host, port, _ := net.SplitHostPort(g.ln.Addr().String())
	replica := testenv.StartRedis(t, "--replicaof", host, port)
	pc, rc := newClient(t, primary.addr), newClient(t, replica.Addr)
	waitFor(t, "the replica to link", func() bool {
		return strings.Contains(rc.Info(context.Background(), "replication").Val(), "master_link_status:up")
	})
	sentinel := testenv.StartRedisSentinel(t, primary.addr)
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: sentinel.Addr})
	t.Cleanup(func() { _ = sc.Close() })
	// The sentinel learns of replicas from the master's INFO (every 10s).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rs, err := sc.Replicas(ctxT(t), testenv.SentinelMaster).Result()
		if err == nil && len(rs) == 1 && rs[0]["flags"] == "slave" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sentinel does not report the replica: %v (%v)", rs, err)
		}
	}
	pe := mustEngine(t, pc)
	key := "sentinel/failover"
	cycles(t, pe, key, 10, 0)
	if n, err := pc.Wait(ctxT(t), 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged (%v)", n, err)
	}
	g.shut.Store(true)
	last := cycles(t, pe, key, 10, 0)
	if c := counter(t, rc, pe, key); c == 0 || c >= last {
		t.Fatalf("the replica's counter is %d; want the replicated one, below the last token %d", c, last)
	}
	if err := sc.Failover(ctxT(t), testenv.SentinelMaster).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := sc.GetMasterAddrByName(ctxT(t), testenv.SentinelMaster).Result()
		if err == nil && len(got) == 2 && net.JoinHostPort(got[0], got[1]) == replica.Addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sentinel did not promote the replica %s: master %v (%v)", replica.Addr, got, err)
		}
	}
	fc := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: testenv.SentinelMaster,
		SentinelAddrs: []string{sentinel.Addr}})
	t.Cleanup(func() { _ = fc.Close() })
	cycles(t, mustEngine(t, fc), key, 1, last)
}

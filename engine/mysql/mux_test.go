package mysql

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
)

// sessionT opens a session-strategy engine on table with opts, closed when
// the test ends.
func sessionT(t *testing.T, dsn, table string, opts ...Option) *Engine {
	t.Helper()
	return openT(t, dsn, append([]Option{WithTable(table), WithStrategy(StrategySession)}, opts...)...)
}

// acquireMux acquires req on e and returns the lease, which must be on a
// shared connection.
func acquireMux(t *testing.T, e *Engine, req engine.Request) *muxLease {
	t.Helper()
	l, err := e.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatalf("acquire %s: %v", req.Key, err)
	}
	m, ok := l.(*muxLease)
	if !ok {
		t.Fatalf("acquire %s: a %T, want a lease on a shared connection", req.Key, l)
	}
	return m
}

// TestSessionConnsHoldMany: an engine with three shared connections and a
// pool of six holds 300 renewed leases at once on those three sessions,
// each holding its share of the lock names, longer than the sessions'
// wait_timeout (their pings keep them alive). KILL of one of them ends
// every lease it carried, with ErrLeaseLost, and none of the others; its
// keys are free again.
func TestSessionConnsHoldMany(t *testing.T) {
	const n = 3
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	e := sessionT(t, dsn, table, WithSessionConns(n), WithMaxConns(n+3))
	leases := make([]*muxLease, n*100)
	conns := map[uint64][]*muxLease{}
	for i := range leases {
		leases[i] = acquireMux(t, e, engine.Request{Key: fmt.Sprintf("many/%d", i), TTL: time.Second,
			Renew: true, Wait: true})
		id := connOf(t, leases[i]).rc.id
		conns[id] = append(conns[id], leases[i])
	}
	if len(conns) != n {
		t.Fatalf("%d leases on %d connections, want %d", len(leases), len(conns), n)
	}
	time.Sleep(3 * time.Second) // past the sessions' 2 s wait_timeout
	var held int
	if err := db.QueryRowContext(hangCtx(t), "SELECT COUNT(*) FROM `"+table+"_names` "+
		"WHERE IS_USED_LOCK(`name`) = `conn`").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != len(leases) {
		t.Errorf("the shared connections hold %d lock names, want %d", held, len(leases))
	}
	for _, l := range leases {
		if l.Err() != nil {
			t.Fatalf("a lease ended while its connection pinged: %v", l.Err())
		}
	}
	var victim uint64
	for id := range conns {
		victim = id
		break
	}
	if _, err := db.ExecContext(hangCtx(t), fmt.Sprintf("KILL CONNECTION %d", victim)); err != nil {
		t.Fatal(err)
	}
	for _, l := range conns[victim] {
		select {
		case <-l.Done():
			if !errors.Is(l.Err(), engine.ErrLeaseLost) {
				t.Errorf("a lease of the killed connection ended with %v, want ErrLeaseLost", l.Err())
			}
		case <-time.After(hang):
			t.Fatalf("a lease of the killed connection was not told within %v", hang)
		}
	}
	time.Sleep(time.Second) // a few pings of the others
	for id, ls := range conns {
		if id == victim {
			continue
		}
		for _, l := range ls {
			if l.Err() != nil {
				t.Fatalf("a lease of a live connection ended: %v", l.Err())
			}
		}
	}
	// The killed connection's keys are free again, to this engine too.
	l := acquireMux(t, e, engine.Request{Key: conns[victim][0].Key(), TTL: time.Minute})
	_ = l.Release(hangCtx(t))
}

// TestSessionConnReentrancy: GET_LOCK is reentrant per session, and a
// shared connection carries many leases, so the engine never sends a grant
// of a name on a session that holds it: a TryLock of a key the engine
// holds is refused, with one shared connection (the try goes to a
// connection pinned for it) and with two (the try goes to the other).
func TestSessionConnReentrancy(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := sessionT(t, dsn, table, WithSessionConns(n))
			req := engine.Request{Key: fmt.Sprintf("re/%d", n), TTL: time.Minute, Renew: true}
			x := acquireMux(t, e, req)
			for range 2 * n {
				if l, err := e.Acquire(hangCtx(t), req); !errors.Is(err, engine.ErrNotAcquired) {
					t.Fatalf("a TryLock of a key the engine holds: %v, %v, want ErrNotAcquired", l, err)
				}
			}
			if err := x.Release(hangCtx(t)); err != nil {
				t.Fatal(err)
			}
			// Released once, the name is free: GET_LOCK counted one hold.
			y := acquireMux(t, sessionT(t, dsn, table), req)
			_ = y.Release(hangCtx(t))
		})
	}
}

// TestForceReleaseRevokesSharedHolder: ForceRelease of a lease that
// another engine holds on a shared connection records the revocation
// instead of killing the connection: the holder is told
// ErrReleasedByOperator at its backend's next ping and lets the name go,
// ForceRelease returns once it has (well within the holder's 6 s
// wait_timeout, after which it would kill), and the other lease on that
// connection stays held.
func TestForceReleaseRevokesSharedHolder(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	holder := sessionT(t, dsn, table, WithSessionConns(1))
	op := sessionT(t, dsn, table)
	req := func(key string) engine.Request {
		return engine.Request{Key: key, TTL: 5 * time.Second, Renew: true, Value: "v-" + key}
	}
	victim, bystander := acquireMux(t, holder, req("rev/victim")), acquireMux(t, holder, req("rev/bystander"))
	if connOf(t, victim) != connOf(t, bystander) {
		t.Fatal("the two leases are on different connections")
	}
	start := time.Now()
	hs, err := op.ForceRelease(hangCtx(t), "rev/victim")
	took := time.Since(start)
	if err != nil || len(hs) != 1 || hs[0].Token != victim.Token() || hs[0].Value != "v-rev/victim" {
		t.Fatalf("ForceRelease = %v, %v; want the holder with token %d", hs, err, victim.Token())
	}
	if took > 3*time.Second {
		t.Errorf("ForceRelease took %v: the holder did not act on its revocation", took)
	}
	select {
	case <-victim.Done():
		if !errors.Is(victim.Err(), engine.ErrReleasedByOperator) {
			t.Errorf("the revoked lease ended with %v, want ErrReleasedByOperator", victim.Err())
		}
	default:
		t.Error("ForceRelease returned before the holder was told")
	}
	time.Sleep(time.Second)
	if bystander.Err() != nil {
		t.Errorf("the other lease on the holder's connection ended: %v", bystander.Err())
	}
	next := acquireMux(t, op, req("rev/victim"))
	if next.Token() <= victim.Token() {
		t.Errorf("the next token %d is not above the revoked %d", next.Token(), victim.Token())
	}
	_ = next.Release(hangCtx(t))
	if _, err := op.ForceRelease(hangCtx(t), "rev/victim"); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("ForceRelease of a free key: %v, want ErrNotHeld", err)
	}
	if err := bystander.Release(hangCtx(t)); err != nil {
		t.Errorf("the other lease's release: %v", err)
	}
}

// TestForceReleaseKillsSilentSharedHolder: a holder on a shared connection
// that never reads its revocation (here a bare session holding the key's
// lock name, with a holder row whose wait_timeout is 1 s) has its
// connection killed once that period has passed, and ForceRelease
// returns with the key free.
func TestForceReleaseKillsSilentSharedHolder(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	e := sessionT(t, dsn, table)
	key := "silent/" + t.Name()
	c, err := rawDB(t, dsn).Conn(hangCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(hangCtx(t), "INSERT INTO `"+table+"_names` "+
		"(`name`, `token`, `conn`, `lock_key`, `idle_s`) SELECT ?, 7, CONNECTION_ID(), ?, 1 FROM DUAL "+
		"WHERE GET_LOCK(?, 0) = 1", lockName(table, key), key, lockName(table, key)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	hs, err := e.ForceRelease(hangCtx(t), key)
	if err != nil || len(hs) != 1 || hs[0].Token != 7 {
		t.Fatalf("ForceRelease = %v, %v; want the silent holder with token 7", hs, err)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("the silent holder was killed after %v, before its 1 s period", took)
	}
	if err := c.PingContext(hangCtx(t)); err == nil {
		t.Errorf("the silent holder's session survived its force release")
	}
	l := acquireMux(t, e, engine.Request{Key: key, TTL: time.Minute})
	_ = l.Release(hangCtx(t))
}

// TestSessionConnIdlesAfterLastRelease: a shared connection keeps the
// wait_timeout of its leases after a release (so that a release is the
// bare RELEASE_LOCK), and its pinger puts the server's own back once it
// holds nothing; the next grant sets it again.
func TestSessionConnIdlesAfterLastRelease(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	var global int
	if err := rawDB(t, dsn).QueryRowContext(hangCtx(t), "SELECT @@GLOBAL.wait_timeout").Scan(&global); err != nil {
		t.Fatal(err)
	}
	e := sessionT(t, dsn, table, WithSessionConns(1), WithConnCheck(50*time.Millisecond))
	waitTimeout := func() int {
		t.Helper()
		var (
			got int
			err error
		)
		if !e.mux.Do(0, func(c sqlcore.MuxConn[string]) {
			err = c.(*muxConn).rc.conn.QueryRowContext(hangCtx(t), "SELECT @@SESSION.wait_timeout").Scan(&got)
		}) {
			t.Fatal("the shared connection died")
		}
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	l := acquireMux(t, e, engine.Request{Key: "idle/a", TTL: 2 * time.Second, Renew: true})
	c := connOf(t, l)
	if got := waitTimeout(); got != 3 {
		t.Errorf("wait_timeout %d while a 2 s lease is held, want 3", got)
	}
	if err := l.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(hang)
	for waitTimeout() != global {
		if time.Now().After(deadline) {
			t.Fatalf("wait_timeout %d after the last release, want the server's %d", waitTimeout(), global)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(4 * time.Second) // past the lease's wait_timeout: the idle session lives on
	l = acquireMux(t, e, engine.Request{Key: "idle/b", TTL: 4 * time.Second, Renew: true})
	if connOf(t, l) != c {
		t.Error("the idle shared connection was replaced")
	}
	if got := waitTimeout(); got != 5 {
		t.Errorf("wait_timeout %d while a 4 s lease is held, want 5", got)
	}
	_ = l.Release(hangCtx(t))
}

// connOf returns the shared connection that holds l.
func connOf(t *testing.T, l *muxLease) *muxConn {
	t.Helper()
	c, ok := l.Conn().(*muxConn)
	if !ok {
		t.Fatalf("the lease of %q has ended: %v", l.Key(), l.Err())
	}
	return c
}

// TestSessionConnStatementsBounded: a shared connection's statements run
// with a context that never ends (Open's engines bound them at the socket
// instead), and still end within the op timeout. Another session holds a
// write lock on the names table, so the next try-grant waits in the
// server: the TryLock fails within a few op timeouts, and the lease that
// shared the connection ends with ErrLeaseLost (its session was cut).
func TestSessionConnStatementsBounded(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	const op = 500 * time.Millisecond
	e := sessionT(t, dsn, table, WithSessionConns(1), WithOpTimeout(op))
	held := acquireMux(t, e, engine.Request{Key: "bound/a", TTL: time.Minute, Renew: true})
	if !connOf(t, held).rc.bounded {
		t.Fatal("Open's shared connection is not bounded at the socket")
	}
	locker, err := rawDB(t, dsn).Conn(hangCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	if _, err := locker.ExecContext(hangCtx(t), "LOCK TABLES `"+table+"_names` WRITE"); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			_, _ = locker.ExecContext(hangCtx(t), "UNLOCK TABLES")
		}
	}
	defer unlock()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		l, err := e.Acquire(hangCtx(t), engine.Request{Key: "bound/b", TTL: time.Minute})
		if l != nil {
			_ = l.Release(hangCtx(t))
		}
		done <- err
	}()
	select {
	case err := <-done:
		took := time.Since(start)
		if err == nil {
			t.Errorf("the try-grant succeeded while the names table was locked")
		}
		t.Logf("the try-grant failed after %v: %v", took, err)
	case <-time.After(10 * op):
		unlock()
		t.Fatalf("the try-grant still waited %v after it was sent, with a %v op timeout", 10*op, op)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), engine.ErrLeaseLost) {
			t.Errorf("the lease on the cut session ended with %v, want ErrLeaseLost", held.Err())
		}
	case <-time.After(10 * op):
		t.Errorf("the lease on the cut session is still held")
	}
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestSessionConnsHoldMany: an engine with N session connections holds
// N*100 renewed leases at once on N backends, each holding its share of
// the advisory locks. pg_terminate_backend on one of them ends every lease
// it carried, with ErrLeaseLost, and none of the others.
func TestSessionConnsHoldMany(t *testing.T) {
	const n = 3
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	e := openT(t, dsn, WithTable(table), WithSessionConns(n), WithMaxConns(n+2))
	leases := make([]engine.Lease, n*100)
	pids := map[uint32][]engine.Lease{}
	for i := range leases {
		leases[i] = acquireT(t, e, engine.Request{Key: fmt.Sprintf("many/%d", i), TTL: 2 * time.Second,
			Renew: true, Wait: true})
		pid := pidOf(t, leases[i])
		pids[pid] = append(pids[pid], leases[i])
	}
	if len(pids) != n {
		t.Fatalf("%d leases on %d backends, want %d", len(leases), len(pids), n)
	}
	var locks int
	list := make([]int32, 0, n)
	for pid := range pids {
		list = append(list, int32(pid))
	}
	if err := pool.QueryRow(hangCtx(t), "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "+
		"AND pid = ANY($1)", list).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks != len(leases) {
		t.Errorf("the session conns hold %d advisory locks, want %d", locks, len(leases))
	}
	victim := uint32(list[0])
	if _, err := pool.Exec(hangCtx(t), "SELECT pg_terminate_backend($1)", int32(victim)); err != nil {
		t.Fatal(err)
	}
	for _, l := range pids[victim] {
		select {
		case <-l.Done():
			if !errors.Is(l.Err(), engine.ErrLeaseLost) {
				t.Errorf("a lease of the killed backend ended with %v, want ErrLeaseLost", l.Err())
			}
		case <-time.After(hang):
			t.Fatalf("a lease of the killed backend was not told within %v", hang)
		}
	}
	time.Sleep(time.Second) // a few pings of the others
	for pid, ls := range pids {
		if pid == victim {
			continue
		}
		for _, l := range ls {
			if l.Err() != nil {
				t.Fatalf("a lease of a live backend ended: %v", l.Err())
			}
		}
	}
	// The killed backend's keys are free again, to this engine too.
	acquireT(t, e, engine.Request{Key: pids[victim][0].Key(), TTL: time.Minute, Wait: true})
}

// TestSessionConnsKeepToOne: an engine that takes one lock after another
// on three shared connections sends every grant and release to one server
// session (a session that has waited costs a wake-up on each side), and
// dials no other; a grant that comes while that session is busy with
// another statement goes to a second one at once instead of queueing
// behind it.
func TestSessionConnsKeepToOne(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	for _, opts := range [][]Option{{WithTable(table)}, clockOpts(table)} {
		e := openT(t, dsn, append(opts, WithSessionConns(3), WithMaxConns(5))...)
		pids := map[uint32]int{}
		for i := range 30 {
			l := acquireT(t, e, sessionReq(fmt.Sprintf("one/%d", i%3), time.Minute))
			pids[pidOf(t, l)]++
			if err := l.Release(hangCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
		if len(pids) != 1 {
			t.Errorf("records %v: 30 cycles one after another went to %d sessions (%v), want 1",
				e.cfg.records, len(pids), pids)
		}
		if n := e.pool.Stat().TotalConns(); n != 1 {
			t.Errorf("records %v: the pool holds %d connections after the cycles, want 1", e.cfg.records, n)
		}
		var (
			other uint32
			err   error
		)
		busy := e.mux.Do(0, func(c sqlcore.MuxConn[int64]) {
			// Backend 0 is locked, as while a statement of another
			// caller runs on it.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var l engine.Lease
			if l, err = e.Acquire(ctx, sessionReq("one/busy", time.Minute)); err == nil {
				other = pidOf(t, l)
				_ = l.Release(context.Background())
			}
		})
		if !busy {
			t.Fatal("backend 0 has no live connection")
		}
		if err != nil {
			t.Fatalf("records %v: a grant while the one session was busy: %v", e.cfg.records, err)
		}
		if _, same := pids[other]; same {
			t.Errorf("records %v: the grant while the session was busy went to it", e.cfg.records)
		}
	}
}

// TestSessionConnReentrancy: advisory locks are reentrant per session,
// and a session connection carries many leases, so the engine never sends
// a grant of a key on a session that holds it: an exclusive TryLock of a
// key the engine holds is refused, a second shared lease gets a session of
// its own (its release frees exactly its share), and a shared TryLock
// behind another process's exclusive waiter is refused.
func TestSessionConnReentrancy(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	e := openT(t, dsn, WithTable(table), WithSessionConns(1))
	other := openT(t, dsn, WithTable(table))
	req := func(key string, m engine.Mode, wait bool) engine.Request {
		return engine.Request{Key: key, Mode: m, TTL: time.Minute, Renew: true, Wait: wait}
	}
	refused := func(eng *Engine, r engine.Request, what string) {
		t.Helper()
		if l, err := eng.Acquire(hangCtx(t), r); !errors.Is(err, engine.ErrNotAcquired) {
			t.Errorf("%s: %v, %v, want ErrNotAcquired", what, l, err)
		}
	}
	x := acquireT(t, e, req("re/x", engine.Exclusive, false))
	refused(e, req("re/x", engine.Exclusive, false), "an exclusive TryLock of a key the engine holds")

	s1 := acquireT(t, e, req("re/s", engine.Shared, false))
	s2 := acquireT(t, e, req("re/s", engine.Shared, false))
	if pidOf(t, s1) == pidOf(t, s2) {
		t.Errorf("two shared leases of one key on one session")
	}
	if err := s1.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	mustHold(t, e, "re/s", engine.Holder{Mode: engine.Shared, Token: s2.Token()})
	refused(other, req("re/s", engine.Exclusive, false), "an exclusive TryLock while one share is held")

	// A waiter for the exclusive lock queues behind s2; a new share must
	// queue behind it, so a shared TryLock is refused.
	waiting := make(chan engine.Lease, 1)
	go func() {
		l, err := other.Acquire(hangCtx(t), req("re/s", engine.Exclusive, true))
		if err != nil {
			t.Error(err)
		}
		waiting <- l
	}()
	waitLocks(t, pool, keyHash(table, "re/s"), 2)
	refused(e, req("re/s", engine.Shared, false), "a shared TryLock behind an exclusive waiter")
	if err := s2.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-waiting:
		if l != nil {
			_ = l.Release(context.Background())
		}
	case <-time.After(hang):
		t.Fatal("the exclusive waiter was not granted after the last share's release")
	}
	if err := x.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestForceReleaseTerminatesSilentHolder: a holder that never reads its
// revocation (here a bare session holding the key's advisory lock, with a
// holder row whose session idle timeout is 500ms) has its backend ended by
// pg_terminate_backend once that period has passed, and ForceRelease
// returns with the key free.
func TestForceReleaseTerminatesSilentHolder(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	e := openT(t, dsn, WithTable(table))
	key := "silent/" + t.Name()
	c, err := rawPool(t, dsn).Acquire(hangCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if _, err := c.Exec(hangCtx(t), "SELECT pg_advisory_lock($1)", keyHash(table, key)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(hangCtx(t), "INSERT INTO "+quote(table+"_held")+
		" (pid, lock_key, mode, token, value, idle_ms) VALUES (pg_backend_pid(), $1, 0, 7, '', 500)", key); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), hang)
	defer cancel()
	hs, err := e.ForceRelease(ctx, key)
	if err != nil || len(hs) != 1 || hs[0].Token != 7 {
		t.Fatalf("ForceRelease = %v, %v; want the silent holder with token 7", hs, err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("the silent holder was ended after %v, before its 500ms period", took)
	}
	if err := c.Ping(hangCtx(t)); err == nil {
		t.Errorf("the silent holder's session survived its force release")
	}
	l := acquireT(t, e, engine.Request{Key: key, TTL: time.Minute})
	_ = l.Release(hangCtx(t))
}

// TestSessionConnIdlesAfterLastRelease: a shared backend keeps the
// idle_session_timeout of its leases set after a release (so that a
// release is the bare unlock), and its pinger resets it to the server's
// own once the backend holds nothing: the session outlives its last
// lease's period with nothing to ping for, and the next grant sets the
// timeout again.
func TestSessionConnIdlesAfterLastRelease(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	e := openT(t, dsn, WithTable(table), WithSessionConns(1))
	const ttl = 600 * time.Millisecond
	show := func() string {
		t.Helper()
		var (
			v   string
			err error
		)
		if !e.mux.Do(0, func(c sqlcore.MuxConn[int64]) {
			err = c.(*muxConn).conn.QueryRow(hangCtx(t), "SHOW idle_session_timeout").Scan(&v)
		}) {
			t.Fatal("the shared connection died")
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	l := acquireT(t, e, sessionReq("idle/a", ttl))
	pid := pidOf(t, l)
	if v := show(); v != "600ms" {
		t.Errorf("idle_session_timeout while a 600ms lease is held: %q", v)
	}
	if err := l.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl)
	var alive int
	if err := pool.QueryRow(hangCtx(t), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
		int32(pid)).Scan(&alive); err != nil {
		t.Fatal(err)
	}
	if alive != 1 {
		t.Fatalf("the backend's session ended %v after its last lease left: the server cut it for idling", 3*ttl)
	}
	l = acquireT(t, e, engine.Request{Key: "idle/b", TTL: time.Minute})
	if p := pidOf(t, l); p != pid {
		t.Errorf("the next lease went to backend %d, want the same %d", p, pid)
	}
	if v := show(); v != "1min" {
		t.Errorf("idle_session_timeout after a one-minute grant on the reset session: %q", v)
	}
}

// TestSessionConnBoundsStatements: a grant on a shared backend whose
// caller's context cannot end is still bounded, by the socket's deadline:
// against a server that stopped answering it fails within two and a half
// op timeouts (the statement cut within one and a half, then one op
// timeout to dial a new backend), and the backend's lease is told it is
// lost.
func TestSessionConnBoundsStatements(t *testing.T) {
	srv := testenv.StartPostgres(t)
	table := testTable(t, srv.DSN)
	const op = time.Second
	e := openT(t, srv.DSN, WithTable(table), WithSessionConns(1), WithOpTimeout(op))
	held := acquireT(t, e, sessionReq("bound/held", time.Minute))
	srv.Pause()
	t.Cleanup(srv.Resume)
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := e.Acquire(context.Background(), engine.Request{Key: "bound/next", TTL: time.Minute})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a TryLock against a stopped server succeeded")
		}
		// One second of slack for a loaded machine: without the socket's
		// deadline the call hangs for as long as the server is stopped.
		if took := time.Since(start); took > op*5/2+time.Second {
			t.Errorf("the TryLock failed after %v, want within %v", took, op*5/2)
		}
	case <-time.After(hang):
		t.Fatalf("a TryLock against a stopped server hung for %v", hang)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), engine.ErrLeaseLost) {
			t.Errorf("the backend's lease ended with %v, want ErrLeaseLost", held.Err())
		}
	case <-time.After(hang):
		t.Error("the lease on the cut backend was not told")
	}
}

// TestSessionConnPingsOutliveTheSocketDeadline: the deadline a grant puts
// on a session connection's socket does not cut the pings that keep its
// leases afterwards, however long they are held: a lease pinged for five
// op timeouts is still held, and its release still works.
func TestSessionConnPingsOutliveTheSocketDeadline(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	const op = 200 * time.Millisecond
	e := openT(t, dsn, WithTable(table), WithSessionConns(1), WithOpTimeout(op))
	l := acquireT(t, e, sessionReq("pinged/a", 900*time.Millisecond))
	select {
	case <-l.Done():
		t.Fatalf("the lease ended while its connection was pinged: %v", l.Err())
	case <-time.After(5 * op):
	}
	if err := l.Release(hangCtx(t)); err != nil {
		t.Fatalf("release after %v of pings: %v", 5*op, err)
	}
}

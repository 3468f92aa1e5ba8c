package mysql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// The tests of this file check the session strategy without holder
// records (WithHolderRecords(false)): the conformance suite, a grant that
// writes nothing, the calls it cannot serve, a token that is the server's
// clock, the release that waits until the clock has left the token's tick,
// and the guard that drops a connection no sooner than kit.ClockGuard
// after its grant's answer. Its tokens after restarts and a kill are in
// token_test.go.

// clockOpts are the options of a session engine without holder records on
// table.
func clockOpts(table string, more ...Option) []Option {
	return append([]Option{WithTable(table), WithStrategy(StrategySession), WithHolderRecords(false)}, more...)
}

func TestConformanceSessionClock(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	// The grant uses no table or procedure, so only the login can be
	// refused (1045).
	wrong := withUser(t, dsn, "", "wrong-password")
	enginetest.Run(t, func() (engine.Engine, error) {
		return Open(dsn, clockOpts(table)...)
	}, enginetest.Options{
		Leftovers: heldSession(db, table),
		Unreachable: func() (engine.Engine, error) {
			return Open(unreachableDSN, clockOpts(table)...)
		},
		AccessDenied: func() (engine.Engine, error) {
			return Open(wrong, clockOpts(table)...)
		},
	})
}

// openClock opens a session engine without holder records on dsn's table,
// closed when the test ends.
func openClock(t *testing.T, dsn, table string) *Engine {
	t.Helper()
	e, err := Open(dsn, clockOpts(table)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// ticks is t in the token unit: 8µs ticks since 2025-01-01T00:00:00Z.
func ticks(t time.Time) uint64 { return uint64(t.UnixMicro()-1735689600000000) / 8 }

// TestClockSessionWritesNothing: leases granted at once (on a shared
// connection) and after a wait (on a pinned one) have tokens read from the
// server's clock, between the client's clock before the grant and after it
// (the server runs on this machine), and leave no row in the names table.
func TestClockSessionWritesNothing(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	a := openClock(t, dsn, table)
	b := openClock(t, dsn, table)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := engine.Request{Key: "nothing", Mode: engine.Exclusive, TTL: 10 * time.Second, Renew: true, Wait: true}
	before := ticks(time.Now())
	first, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if tok := first.Token(); tok < before || tok > ticks(time.Now()) {
		t.Errorf("first token %d, want the server's clock, from %d", tok, before)
	}
	waited := make(chan engine.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, req) // waits on a pinned connection
		if err != nil {
			t.Error(err)
		}
		waited <- l
	}()
	waitUserLock(t, db)
	released := ticks(time.Now())
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-waited
	if second == nil {
		t.FailNow()
	}
	if tok := second.Token(); tok <= first.Token() || tok < released || tok > ticks(time.Now()) {
		t.Errorf("waiter's token %d after %d, want the server's clock, from %d", tok, first.Token(), released)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"_names`").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%s_names has %d rows with a lease held: a grant wrote", table, n)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitUserLock waits until a connection waits in the GET_LOCK of a grant
// without holder records (only this file's tests send that statement).
func waitUserLock(t *testing.T, db *sql.DB) {
	t.Helper()
	waitFor(t, func() bool {
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE " +
			"'SELECT IF(GET_LOCK%' AND STATE = 'User lock'").Scan(&n)
		return err == nil && n > 0
	}, "a wait in GET_LOCK")
}

// waitFor polls cond for up to 20s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestClockSessionRefusesInventory: Holders, List and ForceRelease of a
// session engine without holder records fail with errors.ErrUnsupported
// after checking their arguments, and change nothing.
func TestClockSessionRefusesInventory(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	enginetest.RunNoInventory(t, func() (engine.Engine, error) { return Open(dsn, clockOpts(table)...) })
}

// TestClockReleaseWaitsForFree: a release without records frees the name
// only once the lease's free time has passed, here 20ms ahead, so that a
// grant waiting for the name reads the clock after it. Without the wait
// the waiter's token would be below the tick of the free time.
func TestClockReleaseWaitsForFree(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	e := openClock(t, dsn, table)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := rawDB(t, dsn)
	const ahead = 20 * time.Millisecond
	name := lockName(table, "tick")
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var g sql.NullInt64
	if err := holder.QueryRowContext(ctx, "SELECT GET_LOCK(?, 10)", name).Scan(&g); err != nil || g.Int64 != 1 {
		t.Fatalf("GET_LOCK: %v, %v", g, err)
	}
	// A waiter queues for the name and reads the clock once it holds
	// it, as a grant does.
	got := make(chan uint64, 1)
	go func() {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Error(err)
			got <- 0
			return
		}
		defer c.Close()
		var ans sql.NullString
		if _, err = c.ExecContext(ctx, "SET time_zone = '+00:00'"); err == nil {
			err = c.QueryRowContext(ctx, e.q.sessClockGrant, name, 20).Scan(&ans)
		}
		a, aerr := clockAnswer(ans)
		if err != nil || aerr != nil || a.g != 1 {
			t.Error(a, err, aerr)
		}
		got <- a.token
	}()
	waitUserLock(t, db)
	free := time.Now().Add(ahead)
	began := time.Now()
	held, err := releaseName(ctx, connRelease{holder, e.q.sessRelease}, name, free)
	took := time.Since(began)
	if err != nil || !held {
		t.Fatalf("release: held %v, %v", held, err)
	}
	if next := <-got; next < ticks(free) {
		t.Errorf("the waiter's clock read %d, before the free time's tick %d (the release took %v)", next,
			ticks(free), took)
	}
	if took < ahead*9/10 {
		t.Errorf("the release took %v, for a free time %v ahead", took, ahead)
	}
}

// TestClockLeaseFree: a lease without records, granted at once (on a
// shared connection) and after a wait (on a pinned one), may free its lock
// no later than a tick and a microsecond after its grant returned
// (kit.FreeAt), and not before the grant was sent: a lease with no free
// time would release within its token's tick.
func TestClockLeaseFree(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	a := openClock(t, dsn, table)
	b := openClock(t, dsn, table)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := rawDB(t, dsn)
	req := engine.Request{Key: "free", Mode: engine.Exclusive, TTL: 10 * time.Second, Renew: true, Wait: true}
	free := func(l engine.Lease) time.Time {
		switch l := l.(type) {
		case *muxLease:
			return l.Free()
		case *sessionLease:
			return l.free
		}
		t.Fatalf("lease of type %T", l)
		return time.Time{}
	}
	check := func(what string, l engine.Lease, sent, back time.Time) {
		t.Helper()
		if f := free(l); f.Before(sent) || f.After(back.Add(kit.Tick+time.Microsecond)) {
			t.Errorf("%s: free %v after the grant was sent, %v after it returned; want within a tick and a "+
				"microsecond of its return", what, f.Sub(sent), f.Sub(back))
		}
	}
	sent := time.Now()
	first, err := a.Acquire(ctx, req)
	back := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := first.(*muxLease); !ok {
		t.Fatalf("the first grant is a %T, not on a shared connection", first)
	}
	check("shared", first, sent, back)
	type grant struct {
		l          engine.Lease
		sent, back time.Time
	}
	waited := make(chan grant, 1)
	go func() {
		g := grant{sent: time.Now()}
		l, err := b.Acquire(ctx, req) // waits on a pinned connection
		g.l, g.back = l, time.Now()
		if err != nil {
			t.Error(err)
		}
		waited <- g
	}()
	waitUserLock(t, db)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-waited
	if w.l == nil {
		t.FailNow()
	}
	if _, ok := w.l.(*sessionLease); !ok {
		t.Fatalf("the waiting grant is a %T, not on a pinned connection", w.l)
	}
	check("pinned", w.l, w.sent, w.back)
	if err := w.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClockCloseWaitsPastAnswer: with the guard raised to 30ms, a lease
// its closing engine drops frees its name no sooner than 30ms after: the
// next grant's token, the server's clock, is that much above the lease's.
// Without the guard it would be within a few milliseconds of it.
func TestClockCloseWaitsPastAnswer(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	const guard = 30 * time.Millisecond
	old := clockGuard
	clockGuard = guard
	t.Cleanup(func() { clockGuard = old })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := openClock(t, dsn, table)
	const gap = uint64(guard/(8*time.Microsecond)) * 9 / 10 // ticks, with room for rounding
	req := engine.Request{Key: "guard", Mode: engine.Exclusive, TTL: 10 * time.Second, Renew: true, Wait: true}
	c := openClock(t, dsn, table)
	dropped, err := c.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	last, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer last.Release(context.Background())
	if last.Token() < dropped.Token()+gap {
		t.Errorf("closed engine: next token %d, %d ticks after %d, want at least %d",
			last.Token(), last.Token()-dropped.Token(), dropped.Token(), gap)
	}
}

// TestClockAnswer: a grant's answer without records is the server's clock
// reading, whose 8µs ticks since 2025 are the token and which sets when
// the lock may be freed (kit.FreeAt, from when it is read); '0' is a grant
// that did not take the lock, NULL a failed GET_LOCK, and a reading that
// is not a time an error.
func TestClockAnswer(t *testing.T) {
	for _, c := range []struct {
		ans     sql.NullString
		g       int64
		token   uint64
		left    time.Duration // of the reading's tick, when granted
		wantErr bool
	}{
		{sql.NullString{String: "2025-01-01 00:00:00.000016", Valid: true}, 1, 2, 8 * time.Microsecond, false},
		{sql.NullString{String: "2025-01-01 00:00:00.000023", Valid: true}, 1, 2, time.Microsecond, false},
		{sql.NullString{String: "2026-12-01 22:37:11.123456", Valid: true}, 1,
			uint64((time.Date(2026, 12, 1, 22, 37, 11, 123456000, time.UTC).UnixMicro() - 1735689600000000) / 8),
			8 * time.Microsecond, false},
		{sql.NullString{String: "2024-12-31 23:59:59.999999", Valid: true}, 1, 1, 8 * time.Microsecond, false},
		{sql.NullString{String: "0", Valid: true}, 0, 0, 0, false},
		{sql.NullString{}, -1, 0, 0, false},
		{sql.NullString{String: "1764628631.123456", Valid: true}, -1, 0, 0, true},
	} {
		before := time.Now()
		a, err := clockAnswer(c.ans)
		after := time.Now()
		if a.g != c.g || a.token != c.token || (err != nil) != c.wantErr {
			t.Errorf("clockAnswer(%v) = %d, %d, %v; want %d, %d, error %v", c.ans, a.g, a.token, err, c.g, c.token,
				c.wantErr)
		}
		switch {
		case c.g != 1 && !a.free.IsZero():
			t.Errorf("clockAnswer(%v): free %v without a grant", c.ans, a.free)
		case c.g == 1 && (a.free.Before(before.Add(c.left+time.Microsecond)) ||
			a.free.After(after.Add(c.left+time.Microsecond))):
			t.Errorf("clockAnswer(%v): free %v after the call, want %v", c.ans, a.free.Sub(before),
				c.left+time.Microsecond)
		}
	}
}

package mysql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// The tests of this file check the session strategy without holder
// records (WithHolderRecords(false)): the conformance suite, a grant that
// writes nothing, the calls it cannot serve, a token that is the server's
// clock, and the release that waits for the clock to pass its token. Its
// tokens after restarts and a kill are in token_test.go.

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
			"'SELECT CASE GET_LOCK%' AND STATE = 'User lock'").Scan(&n)
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

// TestClockReleaseWaitsForTick: the release statement without records,
// given a token 20ms ahead of the server's clock, frees the name only once
// the clock has passed it, so that a grant waiting for the name reads a
// later tick. Without the wait the waiter's token would be below the one
// given.
func TestClockReleaseWaitsForTick(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	e := openClock(t, dsn, table)
	db := rawDB(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ahead = 20 * time.Millisecond
	name := lockName(table, "tick")
	utc := func(c *sql.Conn) {
		if _, err := c.ExecContext(ctx, "SET time_zone = '+00:00'"); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	utc(holder)
	var g sql.NullInt64
	if err := holder.QueryRowContext(ctx, e.q.sessClockGrant, name, 0).Scan(&g); err != nil || !g.Valid || g.Int64 == 0 {
		t.Fatalf("grant: %v, %v", g, err)
	}
	waiter, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	utc(waiter)
	got := make(chan uint64, 1)
	go func() {
		var tok sql.NullInt64
		if err := waiter.QueryRowContext(ctx, e.q.sessClockGrant, name, 30).Scan(&tok); err != nil {
			t.Error(err)
		}
		_, _ = waiter.ExecContext(ctx, "DO RELEASE_LOCK(?)", name)
		got <- uint64(tok.Int64)
	}()
	waitUserLock(t, db)
	token := ticks(time.Now().Add(ahead))
	began := time.Now()
	var held sql.NullInt64
	if err := holder.QueryRowContext(ctx, e.q.sessRelease, e.releaseArgs(name, token)...).Scan(&held); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if !held.Valid || held.Int64 != 1 {
		t.Errorf("RELEASE_LOCK answered %v, want 1", held)
	}
	if next := <-got; next <= token {
		t.Errorf("the waiter's token %d after a release of token %d (the release took %v)", next, token, took)
	}
	if took < ahead/2 {
		t.Errorf("the release took %v, for a token %v ahead", took, ahead)
	}
}

package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// The tests of this file check the session strategy without holder
// records (WithHolderRecords(false)): the conformance suite, a grant that
// writes nothing, the calls it cannot serve, and the guard that frees a
// lock no sooner than kit.ClockGuard after its grant's answer. Its tokens after restarts and
// a kill are in token_test.go.

// clockOpts are the options of a session engine without holder records on
// table.
func clockOpts(table string, more ...Option) []Option {
	return append([]Option{WithTable(table), WithHolderRecords(false)}, more...)
}

func TestConformanceSessionClock(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	// The grant writes nothing, so a role without privileges on the
	// tables is not refused by it; one that does not exist is refused its
	// login (28000).
	unknown := withUser(t, dsn, "cerberus_no_such_role", "s3cr3t-denied")
	enginetest.Run(t, func() (engine.Engine, error) {
		return Open(dsn, clockOpts(table)...)
	}, enginetest.Options{
		Leftovers: heldSession(pool, table),
		Unreachable: func() (engine.Engine, error) {
			return Open(unreachableDSN, clockOpts(table)...)
		},
		AccessDenied: func() (engine.Engine, error) {
			return Open(unknown, clockOpts(table)...)
		},
	})
}

// TestClockSessionWritesNothing: exclusive and shared leases, granted on
// the shared connections and on pinned ones (a waiter), leave no row in
// any of the session strategy's tables, and the statements that granted
// and released them assigned no transaction id: nothing was written.
func TestClockSessionWritesNothing(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	a := openT(t, dsn, clockOpts(table)...)
	b := openT(t, dsn, clockOpts(table)...)
	ctx := hangCtx(t)
	req := engine.Request{Key: "nothing", Mode: engine.Exclusive, TTL: 10 * time.Second, Renew: true, Wait: true}
	first, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan engine.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, req) // waits on a pinned connection
		if err != nil {
			t.Error(err)
		}
		waited <- l
	}()
	waitLocks(t, pool, keyHash(table, "nothing"), 2)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-waited
	if second == nil {
		t.FailNow()
	}
	readers := []engine.Lease{}
	for _, e := range []*Engine{a, b} {
		r, err := e.Acquire(ctx, engine.Request{Key: "shared", Mode: engine.Shared, TTL: 10 * time.Second, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	for _, suffix := range []string{"_fences", "_held", "_revoked"} {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+quote(table+suffix)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s%s has %d rows with the leases held: a grant wrote", table, suffix, n)
		}
	}
	for _, l := range append(readers, second) {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A grant and a release that write assign a transaction id, which
	// pg_stat_xact_* cannot show across sessions; the statements are
	// checked instead on a connection of the test's own.
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	h := keyHash(table, "xid")
	for _, q := range []struct {
		name string
		sql  string
		args []any
	}{
		{"shared connection's try, setting the idle timeout", a.q.muxTry[0][1], []any{h, "10000"}},
		{"shared connection's release", a.q.muxRelease[0], []any{h, kit.TickEnd(1)}},
		{"pinned grant", a.q.grantWait, []any{h, "10000"}},
		{"pinned release", a.q.releaseExclusive, []any{h, "0", kit.TickEnd(1)}},
		{"shared connection's shared try", a.q.muxTry[1][0], []any{h}},
		{"shared connection's shared release", a.q.muxRelease[1], []any{h, kit.TickEnd(1)}},
		{"pinned shared grant", a.q.grantWaitShared, []any{h, "10000"}},
		{"pinned shared release", a.q.releaseShared, []any{h, "0", kit.TickEnd(1)}},
	} {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, q.sql, q.args...)
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%s: %v", q.name, err)
		}
		var xid *int64
		err = tx.QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned()::text::bigint").Scan(&xid)
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if xid != nil {
			t.Errorf("%s: assigned transaction id %d: it wrote", q.name, *xid)
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

// TestClockReleaseWaitsForTick: each release statement without records,
// given a token 20ms ahead of the server's clock, unlocks only once the
// clock has passed it, so that a grant waiting for the key reads a later
// tick. Without the wait the waiter's token would be below the one given.
func TestClockReleaseWaitsForTick(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	e := openT(t, dsn, clockOpts(table)...)
	pool := rawPool(t, dsn)
	ctx := hangCtx(t)
	const ahead = 20 * time.Millisecond
	for i, c := range []struct {
		name, sql string
		shared    bool
		args      func(h int64, end time.Time) []any
	}{
		{"shared connection, exclusive", e.q.muxRelease[0], false, func(h int64, end time.Time) []any { return []any{h, end} }},
		{"shared connection, shared", e.q.muxRelease[1], true, func(h int64, end time.Time) []any { return []any{h, end} }},
		{"pinned, exclusive", e.q.releaseExclusive, false, func(h int64, end time.Time) []any { return []any{h, "0", end} }},
		{"pinned, shared", e.q.releaseShared, true, func(h int64, end time.Time) []any { return []any{h, "0", end} }},
	} {
		h := keyHash(table, "tick") + int64(i)
		holder, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lock := "SELECT pg_advisory_lock($1::bigint)"
		if c.shared {
			lock = "SELECT pg_advisory_lock_shared($1::bigint)"
		}
		if _, err := holder.Exec(ctx, lock, h); err != nil {
			t.Fatal(err)
		}
		// A waiter queues for the exclusive lock and reads the clock
		// once it holds it, as a grant does.
		waiter, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan int64, 1)
		go func() {
			defer waiter.Release()
			var tok int64
			err := waiter.QueryRow(ctx, "WITH l AS MATERIALIZED (SELECT pg_advisory_lock($1::bigint)) SELECT "+
				clockTicks+" FROM l", h).Scan(&tok)
			if err != nil {
				t.Error(err)
			}
			_, _ = waiter.Exec(ctx, "SELECT pg_advisory_unlock_all()")
			got <- tok
		}()
		waitLocks(t, pool, h, 2)
		token := int64(ticks(time.Now().Add(ahead)))
		began := time.Now()
		var held bool
		rows, err := holder.Query(ctx, c.sql, c.args(h, kit.TickEnd(uint64(token)))...)
		if err == nil {
			if rows.Next() {
				err = rows.Scan(append([]any{&held}, make([]any, len(rows.FieldDescriptions())-1)...)...)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		took := time.Since(began)
		holder.Release()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !held {
			t.Errorf("%s: the release found the lock not held", c.name)
		}
		if next := <-got; next <= token {
			t.Errorf("%s: the waiter's clock read %d after a release of token %d (the release took %v)",
				c.name, next, token, took)
		}
		if took < ahead/2 {
			t.Errorf("%s: the release took %v, for a token %v ahead", c.name, took, ahead)
		}
	}
}

// TestClockCloseWaitsPastAnswer: with the guard raised to 30ms, closeConn,
// which every close of a connection goes through, frees the locks of the
// connection's session no sooner than 30ms after it is called: a lock
// granted just before is freed that much later, and the next grant's
// token, the server's clock, is that much above the lease's. Without the
// guard it is within a few milliseconds of it.
func TestClockCloseWaitsPastAnswer(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	const guard = 30 * time.Millisecond
	old := clockGuard
	clockGuard = guard
	t.Cleanup(func() { clockGuard = old })
	ctx := hangCtx(t)
	e := openT(t, dsn, clockOpts(table)...)
	b := openT(t, dsn, clockOpts(table)...)
	const gap = uint64(guard/(8*time.Microsecond)) * 9 / 10 // ticks, with room for rounding
	c, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := keyHash(table, "guard-close")
	var (
		ok    bool
		clock *time.Time
		idle  string
	)
	err = c.QueryRow(ctx, e.q.grantTry, h, "10000").Scan(&ok, &clock, &idle)
	e.closeConn(c)
	if err != nil || !ok || clock == nil {
		t.Fatalf("grant: %v, %v, %v", ok, clock, err)
	}
	tok := kit.Ticks(*clock)
	next, err := b.Acquire(ctx, engine.Request{Key: "guard-close", Mode: engine.Exclusive, TTL: 10 * time.Second,
		Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(context.Background())
	if next.Token() < tok+gap {
		t.Errorf("next token %d, %d ticks after %d, want at least %d", next.Token(), next.Token()-tok, tok, gap)
	}
}

// ticks is t in the token unit: 8µs ticks since 2025-01-01T00:00:00Z.
func ticks(t time.Time) uint64 { return uint64(t.UnixMicro()-1735689600000000) / 8 }

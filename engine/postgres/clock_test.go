package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
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
		{"shared connection's release", a.q.muxRelease[0], []any{h}},
		{"pinned grant", a.q.grantWait, []any{h, "10000"}},
		{"pinned release", a.q.releaseExclusive, []any{h, "0"}},
		{"shared connection's shared try", a.q.muxTry[1][0], []any{h}},
		{"shared connection's shared release", a.q.muxRelease[1], []any{h}},
		{"pinned shared grant", a.q.grantWaitShared, []any{h, "10000"}},
		{"pinned shared release", a.q.releaseShared, []any{h, "0"}},
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

// TestClockReleaseWaitsPastAnswer: with the guard raised to 30ms, a lease
// released at once after its grant (on a shared connection, and on a pinned
// one after a wait), or dropped by a closing engine, frees its lock no
// sooner than 30ms after the grant's answer came: the next grant's token,
// the server's clock, is that much above the lease's. Without the guard
// the next token would be within a few milliseconds of it.
func TestClockReleaseWaitsPastAnswer(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	const guard = 30 * time.Millisecond
	old := clockGuard
	clockGuard = guard
	t.Cleanup(func() { clockGuard = old })
	ctx := hangCtx(t)
	a := openT(t, dsn, clockOpts(table)...)
	b := openT(t, dsn, clockOpts(table)...)
	pool := rawPool(t, dsn)
	const gap = uint64(guard/(8*time.Microsecond)) * 9 / 10 // ticks, with room for rounding
	for _, mode := range []engine.Mode{engine.Exclusive, engine.Shared} {
		req := engine.Request{Key: "guard-" + mode.String(), Mode: mode, TTL: 10 * time.Second, Renew: true, Wait: true}
		held, err := a.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next, err := b.Acquire(ctx, engine.Request{Key: req.Key, Mode: engine.Exclusive, TTL: 10 * time.Second,
			Renew: true, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if next.Token() < held.Token()+gap {
			t.Errorf("%v on a shared connection: next token %d, %d ticks after %d, want at least %d",
				mode, next.Token(), next.Token()-held.Token(), held.Token(), gap)
		}
		// A waiter on a pinned connection, released at once too.
		waited := make(chan engine.Lease, 1)
		go func() {
			l, err := a.Acquire(ctx, req)
			if err != nil {
				t.Error(err)
			}
			waited <- l
		}()
		waitLocks(t, pool, keyHash(table, req.Key), 2)
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
		pinned := <-waited
		if pinned == nil {
			t.FailNow()
		}
		if err := pinned.Release(ctx); err != nil {
			t.Fatal(err)
		}
		after, err := b.Acquire(ctx, engine.Request{Key: req.Key, Mode: engine.Exclusive, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if after.Token() < pinned.Token()+gap {
			t.Errorf("%v on a pinned connection: next token %d, %d ticks after %d, want at least %d",
				mode, after.Token(), after.Token()-pinned.Token(), pinned.Token(), gap)
		}
		if err := after.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A lease its closing engine drops.
	c := openT(t, dsn, clockOpts(table)...)
	held, err := c.Acquire(ctx, engine.Request{Key: "guard-close", Mode: engine.Exclusive, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := b.Acquire(ctx, engine.Request{Key: "guard-close", Mode: engine.Exclusive, TTL: 10 * time.Second,
		Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(context.Background())
	if took := time.Since(began); next.Token() < held.Token()+gap {
		t.Errorf("closed engine: next token %d, %d ticks after %d (the close took %v), want at least %d",
			next.Token(), next.Token()-held.Token(), held.Token(), took, gap)
	}
}

// ticks is t in the token unit: 8µs ticks since 2025-01-01T00:00:00Z.
func ticks(t time.Time) uint64 { return uint64(t.UnixMicro()-1735689600000000) / 8 }

package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/postgres"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// The tests of this file check DESIGN.md's contract 5 on PostgreSQL, for
// both strategies: a key's token (the lease strategy's row version in
// "<table>", the session strategy's counter in "<table>_fences", both
// logged tables) is above every token granted before, after the client
// restarts and after the server is killed with SIGKILL and restarted from
// its data directory (crash recovery replays the WAL; the session
// strategy's holder rows are in an unlogged table, which the recovery
// empties, and hold no token that a later grant reads). The session
// strategy commits its counter without waiting for a WAL flush, so a
// crash may lose its last grants; its tokens then rest on the server's
// clock, which every grant raises the counter to: TestTokenIsServerClock
// and TestSessionTokensAfterCounterLost. A session engine without holder
// records (WithHolderRecords(false)) keeps no counter: its token is the
// server's clock alone, and every test here but the counter's runs it too.
// They use only the package's exported API.

// variant is an engine configuration whose tokens the tests check.
type variant struct {
	name string
	opts []postgres.Option
}

var (
	leaseVariant   = variant{"lease", []postgres.Option{postgres.WithStrategy(postgres.StrategyLease)}}
	sessionVariant = variant{"session", []postgres.Option{postgres.WithStrategy(postgres.StrategySession)}}
	clockVariant   = variant{"session-clock", []postgres.Option{postgres.WithStrategy(postgres.StrategySession),
		postgres.WithHolderRecords(false)}}
	variants = []variant{leaseVariant, sessionVariant, clockVariant}
)

// restartWait bounds the retries of a grant while the server restarts.
const restartWait = 30 * time.Second

// tokenTables makes a table name per variant, migrated on dsn, and drops
// them when the test ends.
func tokenTables(t *testing.T, dsn string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range variants {
		var b [5]byte
		_, _ = rand.Read(b[:])
		table := "cerberus_tok_" + hex.EncodeToString(b[:])
		e := openOn(t, dsn, table, s)
		ctx, cancel := context.WithTimeout(context.Background(), restartWait)
		err := e.Migrate(ctx)
		cancel()
		if err != nil {
			t.Fatalf("migrate: %v", err)
		}
		out[s.name] = table
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), restartWait)
		defer cancel()
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return
		}
		defer pool.Close()
		for _, table := range out {
			for _, suffix := range []string{"", "_readers", "_fences", "_sessions", "_held", "_revoked", "_queue", "_released"} {
				_, _ = pool.Exec(ctx, `DROP TABLE IF EXISTS "`+table+suffix+`"`)
			}
		}
	})
	return out
}

// openOn opens an engine of variant v on dsn's table, closed when the test
// ends.
func openOn(t *testing.T, dsn, table string, v variant) *postgres.Engine {
	t.Helper()
	e, err := postgres.Open(dsn, append([]postgres.Option{postgres.WithTable(table)}, v.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// retry bounds the grants of this file's tests (see enginetest.Retry).
var retry = enginetest.Retry{Within: restartWait, Attempt: 5 * time.Second, Pause: 50 * time.Millisecond}

// grantOnce acquires req on e, trying again for up to restartWait while the
// engine reports the server unavailable.
func grantOnce(t *testing.T, e engine.Engine, req engine.Request) engine.Lease {
	t.Helper()
	return retry.Grant(t, e, req)
}

// cycles grants key on e n times (every third grant shared), releasing each
// lease, and returns the largest token seen (see enginetest.Retry.Cycles).
func cycles(t *testing.T, e engine.Engine, key string, n int, after uint64) uint64 {
	t.Helper()
	return retry.Cycles(t, e, engine.Request{Key: key, TTL: 10 * time.Second}, n, after)
}

// TestTokensAfterClientRestart: for each variant, three engines in turn
// on the shared server, each closed before the next opens, as a restarted
// client would be; each continues above the last token of the one before.
func TestTokensAfterClientRestart(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	tables := tokenTables(t, dsn)
	for _, s := range variants {
		var last uint64
		for range 3 {
			e := openOn(t, dsn, tables[s.name], s)
			last = cycles(t, e, "client-restart", 10, last)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestTokenTablesAreLogged: the tables that keep the tokens ("<table>" for
// the lease strategy, "<table>_fences" for the session strategy) are
// logged (relpersistence 'p'): crash recovery empties an unlogged table,
// and the lease strategy's next token would start again from 1. (The
// session strategy's would start again from the server's clock, but a
// logged counter also survives a clean restart and reaches standbys.)
func TestTokenTablesAreLogged(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	tables := tokenTables(t, dsn)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, name := range []string{tables[leaseVariant.name], tables[sessionVariant.name] + "_fences"} {
		var p string
		err := pool.QueryRow(context.Background(),
			"SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass($1)", `"`+name+`"`).Scan(&p)
		if err != nil || p != "p" {
			t.Errorf("table %s: relpersistence %q (%v), want \"p\" (logged)", name, p, err)
		}
	}
}

// TestTokensAfterServerKill: for each variant, grants on a private
// PostgreSQL, which is then killed with SIGKILL (every backend too) and
// restarted from its data directory; the same engines and fresh ones
// continue above the last tokens. The private server runs with fsync=off,
// which loses nothing here: a killed process leaves its writes in the
// operating system's cache; only a crash of the machine would need fsync.
func TestTokensAfterServerKill(t *testing.T) {
	srv := testenv.StartPostgres(t)
	tables := tokenTables(t, srv.DSN)
	last := map[string]uint64{}
	es := map[string]*postgres.Engine{}
	for _, s := range variants {
		es[s.name] = openOn(t, srv.DSN, tables[s.name], s)
		last[s.name] = cycles(t, es[s.name], "kill", 20, 0)
	}
	srv.Kill()
	srv.Restart()
	for _, s := range variants {
		after := cycles(t, es[s.name], "kill", 3, last[s.name])
		t.Logf("%s: token before the kill %d, after the restart %d", s.name, last[s.name], after)
		cycles(t, openOn(t, srv.DSN, tables[s.name], s), "kill", 3, after)
	}
}

// ticks is t in the session strategy's token unit: 8µs ticks since
// 2025-01-01T00:00:00Z.
func ticks(t time.Time) uint64 { return uint64(t.UnixMicro()-1735689600000000) / 8 }

// TestTokenIsServerClock: the first session-strategy token of a new key is
// the server's clock in 8µs ticks since 2025-01-01T00:00:00Z, read between
// the client's clock before and after the grant (the server runs on this
// machine, so it shares the clock), and a later grant stays close to the
// clock too; with and without holder records.
func TestTokenIsServerClock(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	tables := tokenTables(t, dsn)
	for _, v := range []variant{sessionVariant, clockVariant} {
		e := openOn(t, dsn, tables[v.name], v)
		for i := range 3 {
			before := ticks(time.Now())
			last := cycles(t, e, "clock", 1, 0)
			after := ticks(time.Now())
			if last < before || last > after {
				t.Errorf("%s: grant %d: token %d, want the server's clock, between %d and %d", v.name, i+1,
					last, before, after)
			}
		}
	}
}

// TestSessionTokensAfterCounterLost: the session strategy's counters are
// deleted under a holder (as a crash that lost the last commits, or a
// standby promoted without them, would lose them): the holder's release
// and the next grants go on above every earlier token, shared and
// exclusive, because each grant raises the counter to the server's clock.
func TestSessionTokensAfterCounterLost(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	table := tokenTables(t, dsn)[sessionVariant.name]
	e := openOn(t, dsn, table, sessionVariant)
	last := cycles(t, e, "lost", 10, 0)
	held := grantOnce(t, e, engine.Request{Key: "lost", Mode: engine.Exclusive, TTL: 10 * time.Second})
	if held.Token() <= last {
		t.Fatalf("token %d after %d", held.Token(), last)
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(context.Background(), `TRUNCATE "`+table+`_fences"`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), restartWait)
	defer cancel()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cycles(t, e, "lost", 10, held.Token())
	cycles(t, openOn(t, dsn, table, sessionVariant), "lost", 3, held.Token())
}

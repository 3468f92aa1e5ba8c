package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// The tests of this file check DESIGN.md's contract 5 on MySQL/MariaDB, for
// every strategy: a key's token (the lease strategy's row version, the row
// strategy's counter in "<table>_fences", both InnoDB; the session
// strategy's counter in the MEMORY table "<table>_names", which every
// server restart empties, floored by the server's clock) is above every
// token granted before, after the client restarts and after the server is
// killed with SIGKILL and restarted from its data directory, and (for the
// session strategy) after a clean shutdown and restart. A session engine
// without holder records (WithHolderRecords(false)) keeps no counter: its
// token is the server's clock alone, and the tests here run it too. They
// use only the package's exported API.

// variant is an engine configuration whose tokens the tests check.
type variant struct {
	name string
	opts []mysql.Option
}

var (
	sessionVariant = variant{"session", []mysql.Option{mysql.WithStrategy(mysql.StrategySession)}}
	clockVariant   = variant{"session-clock", []mysql.Option{mysql.WithStrategy(mysql.StrategySession),
		mysql.WithHolderRecords(false)}}
	variants = []variant{{"lease", []mysql.Option{mysql.WithStrategy(mysql.StrategyLease)}},
		{"row", []mysql.Option{mysql.WithStrategy(mysql.StrategyRow)}}, sessionVariant, clockVariant}
)

// restartWait bounds the retries of a grant while the server restarts.
const restartWait = 30 * time.Second

// tokenTables makes a table name per strategy, migrated on dsn, and drops
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
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return
		}
		defer db.Close()
		for _, table := range out {
			for _, suffix := range []string{"", "_readers", "_fences", "_queue", "_names", "_released"} {
				_, _ = db.Exec("DROP TABLE IF EXISTS `" + table + suffix + "`")
			}
			_, _ = db.Exec("DROP PROCEDURE IF EXISTS `" + table + "_grant1`")
			_, _ = db.Exec("DROP PROCEDURE IF EXISTS `" + table + "_grant2`")
			_, _ = db.Exec("DROP PROCEDURE IF EXISTS `" + table + "_kill1`")
		}
	})
	return out
}

// openOn opens an engine of variant v on dsn's table, closed when the test
// ends.
func openOn(t *testing.T, dsn, table string, v variant) *mysql.Engine {
	t.Helper()
	e, err := mysql.Open(dsn, append([]mysql.Option{mysql.WithTable(table)}, v.opts...)...)
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

// TestTokensAfterClientRestart: for each strategy, three engines in turn
// on the shared server, each closed before the next opens, as a restarted
// client would be; each continues above the last token of the one before.
func TestTokensAfterClientRestart(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
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

// TestTokensAfterServerKill: for each strategy, grants on a private
// mariadbd, which is then killed with SIGKILL and restarted from its data
// directory (InnoDB recovers the committed counters from its redo log);
// the same engines and fresh ones continue above the last tokens.
func TestTokensAfterServerKill(t *testing.T) {
	srv := testenv.StartMariaDB(t)
	tables := tokenTables(t, srv.DSN)
	last := map[string]uint64{}
	es := map[string]*mysql.Engine{}
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

// TestSessionTokensAfterServerRestart: the session strategy's counters live
// in a MEMORY table, which a clean shutdown and restart of a private
// mariadbd empties (the test checks that it did); the clock floor keeps
// the next tokens above the last, on the same engine and on a fresh one.
// Without holder records there is no counter, and the clock alone does the
// same.
func TestSessionTokensAfterServerRestart(t *testing.T) {
	srv := testenv.StartMariaDB(t)
	tables := tokenTables(t, srv.DSN)
	last := map[string]uint64{}
	es := map[string]*mysql.Engine{}
	for _, v := range []variant{sessionVariant, clockVariant} {
		es[v.name] = openOn(t, srv.DSN, tables[v.name], v)
		last[v.name] = cycles(t, es[v.name], "restart", 20, 0)
	}
	db, err := sql.Open("mysql", srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("SHUTDOWN"); err != nil {
		t.Fatalf("SHUTDOWN: %v", err)
	}
	srv.Restart()
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), restartWait)
	defer cancel()
	table := tables[sessionVariant.name]
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"_names`").Scan(&n); err != nil || n != 0 {
		t.Fatalf("counters after the restart: %d rows, %v; want an empty MEMORY table", n, err)
	}
	for _, v := range []variant{sessionVariant, clockVariant} {
		after := cycles(t, es[v.name], "restart", 3, last[v.name])
		t.Logf("%s: token before the restart %d, after it %d", v.name, last[v.name], after)
		cycles(t, openOn(t, srv.DSN, tables[v.name], v), "restart", 3, after)
	}
}

// TestSessionNamesGrowAfterRestart: Migrate sizes the names table for
// 128 MiB; a restart of the server sizes it by the server's
// max_heap_table_size again (16 MiB here, which the test checks), and a
// grant that then finds it full of names it cannot sweep (counters ahead
// of the clock) rebuilds it at the larger size and is granted.
func TestSessionNamesGrowAfterRestart(t *testing.T) {
	srv := testenv.StartMariaDB(t)
	table := tokenTables(t, srv.DSN)[sessionVariant.name]
	db, err := sql.Open("mysql", srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	size := func() uint64 {
		t.Helper()
		var n uint64
		if err := db.QueryRow("SELECT MAX_DATA_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "+
			"AND TABLE_NAME = ?", table+"_names").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const grown = 96 << 20
	if got := size(); got < grown {
		t.Fatalf("the names table holds %d bytes after Migrate, want at least %d", got, grown)
	}
	if _, err := db.Exec("SHUTDOWN"); err != nil {
		t.Fatalf("SHUTDOWN: %v", err)
	}
	srv.Restart()
	ctx, cancel := context.WithTimeout(context.Background(), restartWait)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	if got := size(); got >= grown {
		t.Fatalf("the names table holds %d bytes after a restart; the test expects the server's 16 MiB", got)
	}
	// Fill it with names whose counters are far ahead of the clock, which
	// no sweep deletes.
	_, err = db.Exec("INSERT INTO `" + table + "_names` (`name`, `token`, `conn`, `lock_key`) " +
		"SELECT CONCAT('filler:', seq), 4611686018427387904, 0, CONCAT('filler/', seq) FROM seq_1_to_40000")
	if err == nil {
		t.Fatal("40,000 names fit in the restarted table; the test expects it full")
	}
	e := openOn(t, srv.DSN, table, sessionVariant)
	l, err := e.Acquire(ctx, engine.Request{Key: "after-full", TTL: time.Minute})
	if err != nil {
		t.Fatalf("a grant on a full names table: %v", err)
	}
	_ = l.Release(ctx)
	if got := size(); got < grown {
		t.Errorf("the names table holds %d bytes after a grant found it full, want at least %d", got, grown)
	}
}

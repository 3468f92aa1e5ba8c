package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/kit"
	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// mysqlSetup returns the test server's DSN (with interpolateParams, as the
// engine's Open uses, so every library pays the same round trips) and a
// lock table unique to this run, migrated now and dropped afterwards.
func mysqlSetup(b *testing.B) (dsn, table string) {
	b.Helper()
	cfg, err := mysqldrv.ParseDSN(testenv.MySQLDSN(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.InterpolateParams = true
	dsn = cfg.FormatDSN()
	var r [5]byte
	_, _ = rand.Read(r[:])
	table = "cerberus_bench_" + hex.EncodeToString(r[:])
	e, err := mysql.Open(dsn, mysql.WithTable(table))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	_ = e.Close()
	b.Cleanup(func() {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return
		}
		defer db.Close()
		for _, s := range []string{"", "_readers", "_fences", "_queue", "_names"} {
			_, _ = db.Exec("DROP TABLE IF EXISTS `" + table + s + "`")
		}
		for _, p := range []string{"_grant1", "_grant2", "_kill1"} {
			_, _ = db.Exec("DROP PROCEDURE IF EXISTS `" + table + p + "`")
		}
	})
	return dsn, table
}

// mysqlLibraries: cerberus on each strategy, and the server's own named
// locks (GET_LOCK/RELEASE_LOCK on a pinned connection), which wake waiters
// inside the server: the baseline; and get_lock+token, the floor of the
// session strategy: its statements without the library on a pinned
// connection (the one-statement try of GET_LOCK(name, 0) and the token,
// then if the key is held the waiting CALL; RELEASE_LOCK).
func mysqlLibraries(dsn, table string) []locker {
	cerb := func(strategy mysql.Strategy, opts ...mysql.Option) func(b testing.TB, key string) LockFunc {
		return func(b testing.TB, key string) LockFunc {
			e, err := mysql.Open(dsn, append([]mysql.Option{mysql.WithTable(table), mysql.WithStrategy(strategy)},
				opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			c, err := cerberus.New(e)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close(); _ = e.Close() })
			return func(ctx context.Context) (func() error, error) {
				l, err := c.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Unlock(context.Background()) }, nil
			}
		}
	}
	return []locker{
		{"cerberus-lease", cerb(mysql.StrategyLease)},
		{"cerberus-row", cerb(mysql.StrategyRow)},
		{"cerberus-session", cerb(mysql.StrategySession)},
		{"cerberus-session-clock", cerb(mysql.StrategySession, mysql.WithHolderRecords(false))},
		{"get_lock", func(b testing.TB, key string) LockFunc {
			name := fmt.Sprintf("%.40s/%s", table, key) // GET_LOCK names are at most 64 characters
			return rawGetLock(b, dsn, name, "SELECT GET_LOCK(?, ?)", false)
		}},
		{"get_lock-prepared", func(b testing.TB, key string) LockFunc {
			// The bare lock as statements prepared once on the
			// connection, as the session strategy's shared connections
			// run their grant and release: what preparing them is worth.
			return preparedGetLock(b, dsn, fmt.Sprintf("%.40s/%s", table, key))
		}},
		{"get_lock+clock-read", func(b testing.TB, key string) LockFunc {
			// The lock and a read of the clock in one statement, no
			// write: no token rule (a clock stepped back gives a smaller
			// one), what the token's write costs beside it.
			name := fmt.Sprintf("%.40s/%s", table, key)
			return rawGetLock(b, dsn, name, "SELECT GET_LOCK(?, ?), "+mysqlClock, true)
		}},
		{"get_lock+clock-tick", func(b testing.TB, key string) LockFunc {
			// The floor of a lock whose tokens are the server's clock and
			// strictly increase, as the session strategy's without holder
			// records: the lock and a read of the clock in one statement,
			// and RELEASE_LOCK once the clock has left the reading's tick
			// (kit.FreeAt), with nothing around them.
			return clockTick(b, dsn, fmt.Sprintf("%.40s/%s", table, key))
		}},
		{"get_lock+sequence", func(b testing.TB, key string) LockFunc {
			// The lock and GREATEST(NEXTVAL of a MariaDB sequence,
			// clock) in one statement: a counter the server hands out
			// from a cache in memory (1,000 values a write).
			name := fmt.Sprintf("%.40s/%s", table, key)
			seq := "`" + table + "_bench_seq`"
			if _, err := pinnedConn(b, dsn).ExecContext(context.Background(), "CREATE SEQUENCE IF NOT EXISTS "+seq); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if c, err := sql.Open("mysql", dsn); err == nil {
					_, _ = c.Exec("DROP SEQUENCE IF EXISTS " + seq)
					_ = c.Close()
				}
			})
			return rawGetLock(b, dsn, name, "SELECT GET_LOCK(?, ?), GREATEST(NEXTVAL("+seq+"), "+mysqlClock+")", true)
		}},
		{"get_lock+token", func(b testing.TB, key string) LockFunc {
			name := fmt.Sprintf("%.40s/%s", table, key)
			try := rawTry(table)
			wait := rawGetLock(b, dsn, name, "CALL `"+table+"_grant2`(?, ?, ?, NULL)", true, key)
			var held time.Time // when a try last found the key held: then wait at once for a second, as the engine does
			return func(ctx context.Context) (func() error, error) {
				if time.Since(held) < time.Second {
					return wait(ctx)
				}
				return wait(context.WithValue(ctx, tryKey{}, func(conn *sql.Conn) (bool, error) {
					res, err := conn.ExecContext(ctx, try, name, key, name)
					if err != nil {
						return false, err
					}
					n, err := res.RowsAffected()
					if n == 0 {
						held = time.Now()
					}
					return n > 0, err
				}))
			}
		}},
	}
}

// rawGetLock is a client of its own connection that locks name with the
// statement grant (its parameters the name, GET_LOCK's timeout and extra;
// its first column GET_LOCK's result, then token columns if tokens),
// unless a try in the call's context (tryKey) took it first, and unlocks
// it with RELEASE_LOCK.
func rawGetLock(b testing.TB, dsn, name, grant string, tokens bool, extra ...any) LockFunc {
	conn := pinnedConn(b, dsn)
	unlock := func() error {
		return releaseLock(conn.QueryRowContext(context.Background(), "SELECT RELEASE_LOCK(?)", name), name)
	}
	return func(ctx context.Context) (func() error, error) {
		wait := 3600
		if dl, ok := ctx.Deadline(); ok {
			wait = int(math.Ceil(time.Until(dl).Seconds()))
		}
		if try, ok := ctx.Value(tryKey{}).(func(*sql.Conn) (bool, error)); ok {
			if held, err := try(conn); err != nil || held {
				return unlock, err
			}
		}
		var got sql.NullInt64
		dest := []any{&got}
		if tokens {
			dest = append(dest, new(uint64))
		}
		if err := conn.QueryRowContext(ctx, grant, append([]any{name, wait}, extra...)...).Scan(dest...); err != nil {
			return nil, err
		}
		if got.Int64 != 1 {
			return nil, fmt.Errorf("GET_LOCK(%q) = %v", name, got)
		}
		return unlock, nil
	}
}

// preparedGetLock is a client of its own connection that locks name with
// GET_LOCK(name, 0) and unlocks it with RELEASE_LOCK, both prepared once
// on the connection.
func preparedGetLock(b testing.TB, dsn, name string) LockFunc {
	conn := pinnedConn(b, dsn)
	ctx := context.Background()
	grant, err := conn.PrepareContext(ctx, "SELECT GET_LOCK(?, 0)")
	if err != nil {
		b.Fatal(err)
	}
	release, err := conn.PrepareContext(ctx, "SELECT RELEASE_LOCK(?)")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = grant.Close(); _ = release.Close() })
	return func(ctx context.Context) (func() error, error) {
		var got sql.NullInt64
		if err := grant.QueryRowContext(ctx, name).Scan(&got); err != nil {
			return nil, err
		}
		if got.Int64 != 1 {
			return nil, fmt.Errorf("GET_LOCK(%q) = %v", name, got)
		}
		return func() error { return releaseLock(release.QueryRowContext(context.Background(), name), name) }, nil
	}
}

// clockTick is a client of its own connection that locks name with
// GET_LOCK and reads the server's clock in the same statement, and unlocks
// it with RELEASE_LOCK once kit.FreeAt of that reading has passed.
func clockTick(b testing.TB, dsn, name string) LockFunc {
	conn := pinnedConn(b, dsn)
	return func(ctx context.Context) (func() error, error) {
		var ans string
		err := conn.QueryRowContext(ctx, "SELECT IF(GET_LOCK(?, 0), CAST(SYSDATE(6) AS CHAR), '0')", name).Scan(&ans)
		if err != nil {
			return nil, err
		}
		// Whatever the session's time zone (a whole number of minutes
		// from UTC), the reading's place in its tick is the same.
		read, err := time.Parse("2006-01-02 15:04:05.000000", ans)
		if err != nil {
			return nil, fmt.Errorf("GET_LOCK(%q) answered %q: %w", name, ans, err)
		}
		free := kit.FreeAt(time.Now(), read)
		return func() error {
			kit.WaitPast(free, 0)
			return releaseLock(conn.QueryRowContext(context.Background(), "SELECT RELEASE_LOCK(?)", name), name)
		}, nil
	}
}

// releaseLock reads row, the answer of RELEASE_LOCK(name), which must have
// freed a lock its session held.
func releaseLock(row *sql.Row, name string) error {
	var rel sql.NullInt64
	if err := row.Scan(&rel); err != nil {
		return err
	}
	if rel.Int64 != 1 {
		return fmt.Errorf("RELEASE_LOCK(%q) = %v", name, rel)
	}
	return nil
}

// tryKey carries, in a rawGetLock call's context, a one-statement try to
// run on its connection before the grant statement.
type tryKey struct{}

// mysqlClock is the session strategy's clock: UTC_TIMESTAMP(6) in 8 µs
// units since 2025-01-01.
const mysqlClock = "(TIMESTAMPDIFF(MICROSECOND, '2025-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 8)"

// rawTry is the session strategy's one-statement try on table's names
// table (its parameters the lock name, the key and the name again): the
// lock and the token in one INSERT ... SELECT.
func rawTry(table string) string {
	clock := mysqlClock
	return "INSERT INTO `" + table + "_names` (`name`, `token`, `conn`, `lock_key`, `value`) " +
		"SELECT ?, LAST_INSERT_ID(GREATEST(1, " + clock + ")), CONNECTION_ID(), ?, NULL FROM DUAL " +
		"WHERE GET_LOCK(?, 0) = 1 ON DUPLICATE KEY UPDATE `token` = LAST_INSERT_ID(GREATEST(`token` + 1, " +
		"VALUES(`token`))), `conn` = VALUES(`conn`), `lock_key` = VALUES(`lock_key`), `value` = VALUES(`value`)"
}

// BenchmarkMySQLUncontended: one client, lock+unlock cycles on one key, in
// rounds of fresh clients (roundsRates). get_lock#2 is a second bare
// GET_LOCK client: its ratio to get_lock is the resolution of the run.
func BenchmarkMySQLUncontended(b *testing.B) {
	once(b, func() {
		dsn, table := mysqlSetup(b)
		rates := roundsRates(b, "mysql/", func(tb testing.TB) []Cycle {
			libs := roundClients(tb, "mysql/", "get_lock", mysqlLibraries(dsn, table))
			// The floor of any lock whose state is durable rows: two
			// autocommit UPDATEs (grant, release) per cycle, each one a
			// log flush on a server with innodb_flush_log_at_trx_commit=1.
			floor := twoCommits(tb, dsn, table)
			for range 50 {
				_ = floor()
			}
			return append(libs, Cycle{"mysql/two_commits", func(context.Context) (func() error, error) {
				return func() error { return nil }, floor()
			}})
		})
		Ratio(out, "mysql_uncontended_cycles", "get_lock#2", "get_lock", rates["get_lock#2"], rates["get_lock"])
		Ratio(out, "mysql_uncontended_cycles", "cerberus-lease", "get_lock", rates["cerberus-lease"], rates["get_lock"])
		Ratio(out, "mysql_uncontended_cycles", "cerberus-lease", "two_commits", rates["cerberus-lease"], rates["two_commits"])
		Ratio(out, "mysql_uncontended_cycles", "cerberus-row", "get_lock", rates["cerberus-row"], rates["get_lock"])
		Ratio(out, "mysql_uncontended_cycles", "cerberus-session", "get_lock", rates["cerberus-session"], rates["get_lock"])
		Ratio(out, "mysql_uncontended_cycles", "cerberus-session-clock", "get_lock", rates["cerberus-session-clock"], rates["get_lock"])
		Ratio(out, "mysql_uncontended_cycles", "cerberus-session-clock", "get_lock+clock-read", rates["cerberus-session-clock"], rates["get_lock+clock-read"])
		Ratio(out, "mysql_uncontended_cycles", "cerberus-session-clock", "get_lock+clock-tick", rates["cerberus-session-clock"], rates["get_lock+clock-tick"])
		Ratio(out, "mysql_uncontended_cycles", "get_lock+clock-tick", "get_lock", rates["get_lock+clock-tick"], rates["get_lock"])
		Ratio(out, "mysql_uncontended_cycles", "cerberus-session", "get_lock+token", rates["cerberus-session"], rates["get_lock+token"])
		Ratio(out, "mysql_uncontended_cycles", "get_lock+token", "get_lock", rates["get_lock+token"], rates["get_lock"])
		Ratio(out, "mysql_uncontended_cycles", "get_lock+clock-read", "get_lock", rates["get_lock+clock-read"], rates["get_lock"])
		Ratio(out, "mysql_uncontended_cycles", "get_lock-prepared", "get_lock", rates["get_lock-prepared"], rates["get_lock"])
		Ratio(out, "mysql_uncontended_cycles", "cerberus-session-clock", "get_lock-prepared", rates["cerberus-session-clock"], rates["get_lock-prepared"])
		Ratio(out, "mysql_uncontended_cycles", "get_lock+sequence", "get_lock", rates["get_lock+sequence"], rates["get_lock"])
	})
}

// pinnedConn returns a connection of a pool of its own on dsn, both closed
// when the benchmark ends.
func pinnedConn(b testing.TB, dsn string) *sql.Conn {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(); _ = db.Close() })
	return conn
}

// twoCommits returns a cycle of two autocommit UPDATEs of one row of the
// lock table on a pinned connection: no lock, only the writes.
func twoCommits(b testing.TB, dsn, table string) func() error {
	conn := pinnedConn(b, dsn)
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, "INSERT IGNORE INTO `"+table+"` (`lock_key`) VALUES ('floor')"); err != nil {
		b.Fatal(err)
	}
	q := "UPDATE `" + table + "` SET `version` = `version` + 1 WHERE `lock_key` = 'floor'"
	return func() error {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return err
		}
		_, err := conn.ExecContext(ctx, q)
		return err
	}
}

// BenchmarkMySQLHotKey: 16 clients on one key, 1 ms critical section.
func BenchmarkMySQLHotKey(b *testing.B) {
	once(b, func() {
		dsn, table := mysqlSetup(b)
		var libs []locker
		for _, l := range mysqlLibraries(dsn, table) {
			// The measures of the token's write are uncontended only; the
			// session strategy without records has a run of its own
			// (BenchmarkMySQLHotKeyClock), within max_connections.
			switch l.name {
			case "get_lock+clock-read", "get_lock+clock-tick", "get_lock-prepared", "get_lock+sequence",
				"cerberus-session-clock":
			default:
				libs = append(libs, l)
			}
		}
		names := make([]string, len(libs))
		for i, l := range libs {
			names[i] = l.name
		}
		// Interleaved rounds, so that the machine's load weighs on every
		// library alike.
		res := hotKeyBy("mysql/", names, func(i int) LockFunc { return libs[i].build(b, "hot/"+libs[i].name) })
		Ratio(out, "mysql_hotkey_acq", "cerberus-lease", "get_lock", res["cerberus-lease"].Rate(), res["get_lock"].Rate())
		Ratio(out, "mysql_hotkey_acq", "cerberus-row", "get_lock", res["cerberus-row"].Rate(), res["get_lock"].Rate())
		Ratio(out, "mysql_hotkey_wait_p99", "cerberus-row", "get_lock", float64(res["cerberus-row"].WaitP99), float64(res["get_lock"].WaitP99))
		Ratio(out, "mysql_hotkey_wait_p99", "cerberus-lease", "get_lock", float64(res["cerberus-lease"].WaitP99), float64(res["get_lock"].WaitP99))
		Ratio(out, "mysql_hotkey_acq", "cerberus-session", "get_lock", res["cerberus-session"].Rate(), res["get_lock"].Rate())
		Ratio(out, "mysql_hotkey_wait_p99", "cerberus-session", "get_lock", float64(res["cerberus-session"].WaitP99), float64(res["get_lock"].WaitP99))
		Ratio(out, "mysql_hotkey_wait_p99", "cerberus-session", "get_lock+token", float64(res["cerberus-session"].WaitP99), float64(res["get_lock+token"].WaitP99))
		Ratio(out, "mysql_hotkey_wait_p99", "get_lock+token", "get_lock", float64(res["get_lock+token"].WaitP99), float64(res["get_lock"].WaitP99))
	})
}

// BenchmarkMySQLHotKeyClock: the hot key of BenchmarkMySQLHotKey for the
// session strategy without holder records, interleaved in rounds with the
// bare GET_LOCK and its floor (GET_LOCK and a clock read): a run of its own,
// so that its 16 clients' connections stay within the server's
// max_connections beside the other benchmark's libraries.
func BenchmarkMySQLHotKeyClock(b *testing.B) {
	once(b, func() {
		dsn, table := mysqlSetup(b)
		var libs []locker
		for _, l := range mysqlLibraries(dsn, table) {
			if l.name == "cerberus-session-clock" || l.name == "get_lock" || l.name == "get_lock+clock-read" {
				libs = append(libs, l)
			}
		}
		names := make([]string, len(libs))
		for i, l := range libs {
			names[i] = l.name
		}
		// Interleaved rounds, so that the machine's load weighs on every
		// library alike.
		res := hotKeyBy("mysql/", names, func(i int) LockFunc { return libs[i].build(b, "hotclock/"+libs[i].name) })
		Ratio(out, "mysql_hotkey_acq", "cerberus-session-clock", "get_lock", res["cerberus-session-clock"].Rate(), res["get_lock"].Rate())
		Ratio(out, "mysql_hotkey_wait_p99", "cerberus-session-clock", "get_lock", float64(res["cerberus-session-clock"].WaitP99), float64(res["get_lock"].WaitP99))
		Ratio(out, "mysql_hotkey_wait_p99", "get_lock+clock-read", "get_lock", float64(res["get_lock+clock-read"].WaitP99), float64(res["get_lock"].WaitP99))
	})
}

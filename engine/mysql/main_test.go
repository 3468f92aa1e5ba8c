package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus/internal/testenv"
)

// testTable returns a table name unique to this test run, creates the
// engine's tables under it, and drops them when the test ends.
func testTable(t *testing.T, dsn string) string {
	t.Helper()
	migrate := func(ctx context.Context, table string) error {
		e, err := Open(dsn, WithTable(table))
		if err != nil {
			return fmt.Errorf("open: %w", err)
		}
		defer func() { _ = e.Close() }()
		return e.Migrate(ctx)
	}
	return testenv.SQLTable(t, migrate, func(table string) {
		dropTables(t, rawDB(t, dsn), table)
	})
}

// dropTables drops the tables and procedures Migrate made for table.
func dropTables(t testing.TB, db *sql.DB, table string) {
	for _, s := range []string{"", "_readers", "_fences", "_queue", "_names", "_released"} {
		if _, err := db.Exec("DROP TABLE IF EXISTS `" + table + s + "`"); err != nil {
			t.Errorf("drop %s%s: %v", table, s, err)
		}
	}
	for _, p := range []string{"_grant1", "_grant2", "_kill1"} {
		if _, err := db.Exec("DROP PROCEDURE IF EXISTS `" + table + p + "`"); err != nil {
			t.Errorf("drop %s%s: %v", table, p, err)
		}
	}
}

// heldSession lists what the session strategy still holds for key in
// table: its lock name, if any connection holds it.
func heldSession(db *sql.DB, table string) func(ctx context.Context, key string) ([]string, error) {
	return func(ctx context.Context, key string) ([]string, error) {
		var conn sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", lockName(table, key)).Scan(&conn); err != nil {
			return nil, err
		}
		if conn.Valid {
			return []string{fmt.Sprintf("lock name held by connection %d", conn.Int64)}, nil
		}
		return nil, nil
	}
}

// rawDB is a plain database/sql pool on dsn for the tests' own statements,
// closed when the test ends.
func rawDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("dsn: %v", err)
	}
	cfg.ParseTime = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// heldLease lists what the lease strategy still holds for key: a row with
// an unexpired owner, unexpired reader rows, or unexpired waiters' tickets.
// Cleared rows stay by design (they keep the version) and are not
// leftovers.
func heldLease(db *sql.DB, table string) func(ctx context.Context, key string) ([]string, error) {
	return func(ctx context.Context, key string) ([]string, error) {
		var left []string
		var owner sql.NullString
		err := db.QueryRowContext(ctx, "SELECT `owner` FROM `"+table+"` WHERE `lock_key` = ? AND `owner` IS NOT NULL AND `expires_at` > NOW(6)", key).Scan(&owner)
		switch {
		case err == nil:
			left = append(left, "row held by "+owner.String)
		case !errors.Is(err, sql.ErrNoRows):
			return nil, err
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"_readers` WHERE `lock_key` = ? AND `expires_at` > NOW(6)", key).Scan(&n); err != nil {
			return nil, err
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("%d unexpired readers", n))
		}
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"_queue` WHERE `lock_key` = ? AND `expires_at` > NOW(6)", key).Scan(&n); err != nil {
			return nil, err
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("%d unexpired tickets", n))
		}
		return left, nil
	}
}

// heldRow reports whether any transaction holds or waits for a lock on
// key's row, by trying to lock it without waiting.
func heldRow(db *sql.DB, table string) func(ctx context.Context, key string) ([]string, error) {
	return func(ctx context.Context, key string) ([]string, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback() }()
		var v uint64
		err = tx.QueryRowContext(ctx, "SELECT `version` FROM `"+table+"` WHERE `lock_key` = ? FOR UPDATE NOWAIT", key).Scan(&v)
		switch n := errNumber(err); {
		case err == nil, errors.Is(err, sql.ErrNoRows):
			return nil, nil
		case n == errLockWaitTimeout || n == errLockNowait:
			return []string{"row lock on " + key}, nil
		default:
			return nil, err
		}
	}
}

// testDSN is the test server's DSN.
func testDSN(t *testing.T) string {
	t.Helper()
	return testenv.MySQLDSN(t)
}

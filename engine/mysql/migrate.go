package mysql

import (
	"context"
	"fmt"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
)

// maxTableLen leaves room for the "_readers" and "_fences" suffixes within
// the 64-character identifier limit.
const maxTableLen = 48

// checkTable accepts 1 to maxTableLen ASCII letters, digits and underscores,
// so that the name can be quoted into statements without escaping.
func checkTable(t string) error {
	if t == "" || len(t) > maxTableLen {
		return fmt.Errorf("%w: mysql: table name %q must be 1 to %d characters", engine.ErrInvalidRequest,
			t, maxTableLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return fmt.Errorf("%w: mysql: table name %q may hold only ASCII letters, digits and underscores",
				engine.ErrInvalidRequest, t)
		}
	}
	return nil
}

// schema returns the CREATE TABLE statements for table. The types are
// chosen to mean the same on MySQL 8.4 and MariaDB 10.11:
//
//   - lock_key VARBINARY(512): byte-exact and case-sensitive, with no
//     collation that could make "A" and "a" one lock.
//   - version BIGINT UNSIGNED: bumped by every grant, never reset. Rows are
//     cleared on release, not deleted, so the version survives.
//   - expires_at DATETIME(6): always computed by the server as NOW(6) plus
//     the lease period; the client's clock is never written.
//   - ttl_us: the lease period, so one renewal statement can extend every
//     lease of an engine by its own period.
func schema(table string) []string {
	return []string{
		"CREATE TABLE IF NOT EXISTS `" + table + "` (" +
			"`lock_key` VARBINARY(512) NOT NULL," +
			"`owner` VARBINARY(64) NULL," +
			"`mode` TINYINT UNSIGNED NOT NULL DEFAULT 0," +
			"`version` BIGINT UNSIGNED NOT NULL DEFAULT 0," +
			"`ttl_us` BIGINT UNSIGNED NOT NULL DEFAULT 0," +
			"`expires_at` DATETIME(6) NULL," +
			"PRIMARY KEY (`lock_key`)" +
			") ENGINE=InnoDB",
		"CREATE TABLE IF NOT EXISTS `" + table + "_readers` (" +
			"`lock_key` VARBINARY(512) NOT NULL," +
			"`owner` VARBINARY(64) NOT NULL," +
			"`version` BIGINT UNSIGNED NOT NULL," +
			"`ttl_us` BIGINT UNSIGNED NOT NULL," +
			"`expires_at` DATETIME(6) NOT NULL," +
			"PRIMARY KEY (`lock_key`, `owner`)" +
			") ENGINE=InnoDB",
		// The row strategy's tokens: one durable counter per key, raised
		// in its own committed statement by each holder once it holds
		// the key's row lock.
		"CREATE TABLE IF NOT EXISTS `" + table + "_fences` (" +
			"`lock_key` VARBINARY(512) NOT NULL," +
			"`fence` BIGINT UNSIGNED NOT NULL," +
			"PRIMARY KEY (`lock_key`)" +
			") ENGINE=InnoDB",
	}
}

// Migrate creates the engine's tables if they do not exist: the lock table,
// "<table>_readers" for shared leases and "<table>_fences" for the row
// strategy's fencing tokens. It is idempotent and safe to run from many
// processes at once.
func (e *Engine) Migrate(ctx context.Context) error {
	if e.frame.Closed() {
		return engine.ErrClosed
	}
	for _, stmt := range schema(e.cfg.table) {
		if _, err := e.db.ExecContext(ctx, stmt); err != nil {
			return e.opErr(ctx, "migrate", "", err)
		}
	}
	return nil
}

// queries are the engine's statements with the table names filled in.
type queries struct {
	grant, insert, release, renew, alive                            string
	sharedGrant, sharedInsert, readerAdd, readerTidy, readerRelease string
	readerRenew, readerAlive                                        string
	rowLock, rowShare, rowTryLock, rowEnsure, rowToken              string
}

func buildQueries(t string) queries {
	r := "`" + t + "_readers`"
	k := "`" + t + "_fences`"
	t = "`" + t + "`"
	free := "(`owner` IS NULL OR `expires_at` IS NULL OR `expires_at` <= NOW(6))"
	return queries{
		// An exclusive grant: one statement, true only if the row is free
		// or expired and no unexpired reader remains. The reader check is
		// correlated with the locked row, so it runs after InnoDB has
		// locked it; inside an UPDATE it is a locking read.
		grant: "UPDATE " + t + " SET `owner` = ?, `mode` = 0, `ttl_us` = ?, " +
			"`version` = LAST_INSERT_ID(`version` + 1), `expires_at` = NOW(6) + INTERVAL ? MICROSECOND " +
			"WHERE `lock_key` = ? AND " + free + " AND NOT EXISTS (SELECT 1 FROM " + r + " AS `r` " +
			"WHERE `r`.`lock_key` = " + t + ".`lock_key` AND `r`.`expires_at` > NOW(6))",
		// The first grant of a key creates its row with version 1.
		insert: "INSERT IGNORE INTO " + t +
			" (`lock_key`, `owner`, `mode`, `ttl_us`, `version`, `expires_at`) " +
			"VALUES (?, ?, 0, ?, 1, NOW(6) + INTERVAL ? MICROSECOND)",
		release: "UPDATE " + t + " SET `owner` = NULL, `expires_at` = NULL " +
			"WHERE `lock_key` = ? AND `owner` = ? AND `version` = ? AND `expires_at` > NOW(6)",
		renew: "UPDATE " + t + " SET `expires_at` = NOW(6) + INTERVAL `ttl_us` MICROSECOND " +
			"WHERE `lock_key` IN (%s) AND `owner` IN (%s) AND `expires_at` > NOW(6)",
		alive: "SELECT `owner` FROM " + t +
			" WHERE `lock_key` IN (%s) AND `owner` IN (%s) AND `expires_at` > NOW(6)",

		// A shared grant bumps the key row's version (so tokens of readers
		// and writers interleave in one sequence) and adds a reader row.
		sharedGrant: "UPDATE " + t + " SET `owner` = NULL, `expires_at` = NULL, `mode` = 1, " +
			"`version` = LAST_INSERT_ID(`version` + 1) WHERE `lock_key` = ? AND " + free,
		sharedInsert: "INSERT IGNORE INTO " + t + " (`lock_key`, `mode`, `version`) VALUES (?, 1, 1)",
		readerAdd: "INSERT INTO " + r +
			" (`lock_key`, `owner`, `version`, `ttl_us`, `expires_at`) VALUES (?, ?, ?, ?, NOW(6) + " +
			"INTERVAL ? MICROSECOND)",
		readerTidy: "DELETE FROM " + r + " WHERE `lock_key` = ? AND `expires_at` <= NOW(6)",
		readerRelease: "DELETE FROM " + r +
			" WHERE `lock_key` = ? AND `owner` = ? AND `version` = ? AND `expires_at` > NOW(6)",
		readerRenew: "UPDATE " + r + " SET `expires_at` = NOW(6) + INTERVAL `ttl_us` MICROSECOND " +
			"WHERE `lock_key` IN (%s) AND `owner` IN (%s) AND `expires_at` > NOW(6)",
		readerAlive: "SELECT `owner` FROM " + r +
			" WHERE `lock_key` IN (%s) AND `owner` IN (%s) AND `expires_at` > NOW(6)",

		rowLock:    "SELECT `version` FROM " + t + " WHERE `lock_key` = ? FOR UPDATE",
		rowTryLock: "SELECT `version` FROM " + t + " WHERE `lock_key` = ? FOR UPDATE NOWAIT",
		rowShare:   "SELECT `version` FROM " + t + " WHERE `lock_key` = ? LOCK IN SHARE MODE",
		rowEnsure:  "INSERT IGNORE INTO " + t + " (`lock_key`) VALUES (?)",
		rowToken: "INSERT INTO " + k + " (`lock_key`, `fence`) VALUES (?, 1)" +
			" ON DUPLICATE KEY UPDATE `fence` = LAST_INSERT_ID(`fence` + 1)",
	}
}

// placeholders returns "?, ?, ..." with n marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

package mysql

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
)

// maxTableLen leaves room for the "_readers", "_fences", "_queue",
// "_names", "_grant2" and "_released" suffixes within the 64-character
// identifier limit.
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
//   - value VARBINARY(256): the Request.Value of the lease (NULL when the
//     row or reader row holds none), stored byte for byte.
//   - "<table>_queue": the lease strategy's waiters, one ticket each, in
//     AUTO_INCREMENT order, with mode 0 (exclusive) or 1 (shared) and an
//     expiry on the server's clock, refreshed while the waiter waits.
func schema(table string) []string {
	return []string{
		"CREATE TABLE IF NOT EXISTS `" + table + "` (" +
			"`lock_key` VARBINARY(512) NOT NULL," +
			"`owner` VARBINARY(64) NULL," +
			"`mode` TINYINT UNSIGNED NOT NULL DEFAULT 0," +
			"`version` BIGINT UNSIGNED NOT NULL DEFAULT 0," +
			"`ttl_us` BIGINT UNSIGNED NOT NULL DEFAULT 0," +
			"`expires_at` DATETIME(6) NULL," +
			valueColumn + "," +
			"PRIMARY KEY (`lock_key`)" +
			") ENGINE=InnoDB",
		"CREATE TABLE IF NOT EXISTS `" + table + "_readers` (" +
			"`lock_key` VARBINARY(512) NOT NULL," +
			"`owner` VARBINARY(64) NOT NULL," +
			"`version` BIGINT UNSIGNED NOT NULL," +
			"`ttl_us` BIGINT UNSIGNED NOT NULL," +
			"`expires_at` DATETIME(6) NOT NULL," +
			valueColumn + "," +
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
		// The session strategy's token counter and holder of each lock
		// name, a MEMORY table: nothing is flushed to disk per grant. A
		// server restart empties it; the grant's clock floor (see
		// sessionGrant) keeps tokens above the lost counters.
		"CREATE TABLE IF NOT EXISTS `" + table + "_names` (" +
			"`name` VARBINARY(64) NOT NULL," +
			"`token` BIGINT UNSIGNED NOT NULL," +
			"`conn` BIGINT UNSIGNED NOT NULL," +
			"`lock_key` VARBINARY(512) NOT NULL," +
			valueColumn + "," +
			"`released` BIGINT UNSIGNED NOT NULL DEFAULT 0," +
			idleColumn + "," +
			"PRIMARY KEY (`name`)" +
			") ENGINE=MEMORY",
		"CREATE TABLE IF NOT EXISTS `" + table + "_queue` (" +
			"`ticket` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT," +
			"`lock_key` VARBINARY(512) NOT NULL," +
			"`owner` VARBINARY(64) NOT NULL," +
			"`mode` TINYINT UNSIGNED NOT NULL," +
			"`expires_at` DATETIME(6) NOT NULL," +
			"PRIMARY KEY (`ticket`)," +
			"KEY `by_key` (`lock_key`, `ticket`)" +
			") ENGINE=InnoDB",
		// Tombstones of the leases an operator freed (ForceRelease), by
		// owner value, each kept until its lease's period has run out
		// after the release, so that the holder's next renewal tells why
		// its lease ended.
		"CREATE TABLE IF NOT EXISTS `" + table + "_released` (" +
			"`owner` VARBINARY(64) NOT NULL," +
			"`lock_key` VARBINARY(512) NOT NULL," +
			"`version` BIGINT UNSIGNED NOT NULL," +
			"`expires_at` DATETIME(6) NOT NULL," +
			"PRIMARY KEY (`owner`)," +
			"KEY `by_expiry` (`expires_at`)" +
			") ENGINE=InnoDB",
	}
}

// valueColumn holds a lease's Request.Value (engine.MaxValueLen bytes).
const valueColumn = "`value` VARBINARY(256) NULL"

// idleColumn holds, in a session holder's row, its connection's
// wait_timeout in seconds when the connection is shared by many leases
// (WithSessionConns), or 0 when it is pinned to the lease: ForceRelease
// revokes the first kind and kills the second.
const idleColumn = "`idle_s` INT UNSIGNED NOT NULL DEFAULT 0"

// namesHeap is the most memory, in bytes, the "<table>_names" MEMORY
// table may take: 128 MiB, about 155,000 lock names. The server's
// max_heap_table_size (16 MiB by default, about 19,000 names) fixes a
// MEMORY table's size when it is created or altered, and again for every
// MEMORY table when the server restarts, so Migrate, and a grant that
// finds the table full, set it for their own session only and rebuild a
// smaller table (growNames).
const namesHeap = 128 << 20

// errDupColumn is the server's error for ADD COLUMN of a column that
// exists: another Migrate added it first.
const errDupColumn = 1060

// Migrate creates the engine's tables if they do not exist: the lock table,
// "<table>_readers" for shared leases, "<table>_queue" for the lease
// strategy's waiters, "<table>_fences" for the row strategy's fencing
// tokens, "<table>_released" for the tombstones of ForceRelease, and for
// the session strategy the MEMORY table "<table>_names" and the stored
// procedures "<table>_grant2" and "<table>_kill1" (which needs the CREATE
// ROUTINE privilege). The lease strategy's statements name the queue
// table, so run Migrate after upgrading from a version without it; on
// tables without the released table everything but ForceRelease works,
// and a released lease is told engine.ErrLeaseLost instead of
// engine.ErrReleasedByOperator. On tables made by an earlier version it adds
// the value column to the lock table and the readers table; run it once
// after upgrading, before the new version takes locks. It is idempotent and
// safe to run from many processes at once.
func (e *Engine) Migrate(ctx context.Context) error {
	if e.frame.Closed() {
		return engine.ErrClosed
	}
	for _, stmt := range schema(e.cfg.table) {
		if _, err := e.db.ExecContext(ctx, stmt); err != nil {
			return e.opErr(ctx, "migrate", "", err)
		}
	}
	for _, stmt := range procedures(e.cfg.table) {
		if _, err := e.db.ExecContext(ctx, stmt); err != nil {
			return e.opErr(ctx, "migrate", "", err)
		}
	}
	// Rows of lock names nobody holds, whose counters the clock floor
	// has overtaken, are cleared.
	if _, err := e.db.ExecContext(ctx, e.q.sessSweep); err != nil {
		return e.opErr(ctx, "migrate", "", err)
	}
	for _, t := range []string{e.cfg.table, e.cfg.table + "_readers"} {
		if err := e.addColumn(ctx, t, "value", valueColumn); err != nil {
			return e.opErr(ctx, "migrate", "", err)
		}
	}
	if err := e.addColumn(ctx, e.cfg.table+"_names", "idle_s", idleColumn); err != nil {
		return e.opErr(ctx, "migrate", "", err)
	}
	if err := e.growNames(ctx); err != nil {
		return e.opErr(ctx, "migrate", "", err)
	}
	return nil
}

// growNames rebuilds "<table>_names" with room for namesHeap bytes if it
// has less (made with the server's default max_heap_table_size, or by an
// earlier version), on a connection of its own whose session setting
// never goes back to the pool. The rebuild keeps the rows.
func (e *Engine) growNames(ctx context.Context) error {
	var size uint64
	if err := e.db.QueryRowContext(ctx, "SELECT MAX_DATA_LENGTH FROM information_schema.TABLES "+
		"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", e.cfg.table+"_names").Scan(&size); err != nil {
		return err
	}
	if size >= namesHeap*3/4 {
		return nil
	}
	c, err := e.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		_ = c.Raw(func(any) error { return driver.ErrBadConn }) // its session setting stays with it
		_ = c.Close()
	}()
	if _, err := c.ExecContext(ctx, fmt.Sprintf("SET SESSION max_heap_table_size = %d", namesHeap)); err != nil {
		return err
	}
	_, err = c.ExecContext(ctx, "ALTER TABLE `"+e.cfg.table+"_names` ENGINE=MEMORY")
	return err
}

// addColumn adds column (named col, defined by def) to table unless it has
// it. MySQL has no ADD COLUMN IF NOT EXISTS, so the catalogue is asked
// first, and a concurrent Migrate that added it meanwhile is no error.
func (e *Engine) addColumn(ctx context.Context, table, col, def string) error {
	var n int
	if err := e.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS "+
		"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?", table, col).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	_, err := e.db.ExecContext(ctx, "ALTER TABLE `"+table+"` ADD COLUMN "+def)
	if errNumber(err) == errDupColumn {
		return nil
	}
	return err
}

// queries are the engine's statements with the table names filled in.
type queries struct {
	grant, insert, release, renew, alive, undo, holders               string
	sharedGrant, sharedInsert, readerAdd, readerTidy, readerRelease   string
	readerAddCounted, readerRenew, readerAlive, readerUndo            string
	rowLock, rowShare, rowTryLock, rowEnsure, rowToken                string
	rowMark, rowMarkShared, rowHolders, rowRecords                    string
	enqueue, queueTidy, queueRefresh, queuePlace, dequeue, ticketDone string
	sessTry, sessWait, sessRelease, sessHolders, sessList, sessKill   string
	// sessClockGrant is the grant without holder records
	// (clockSession), empty with them.
	sessClockGrant                                              string
	sessHolder, sessMarked, sessSweep                           string
	sessRevoke, sessRevoked, sessReleased, sessStill            string
	freeRow, freeReaders, freeTidy, freeClear, freeClearReaders string
	tombstone, released                                         string
}

// buildQueries returns the statements on table and its "_readers",
// "_queue" and "_fences" tables; without records, the session strategy's
// grants and release are those of clockSession.
func buildQueries(table string, records bool) queries {
	t, r, k, w := "`"+table+"`", "`"+table+"_readers`", "`"+table+"_fences`", "`"+table+"_queue`"
	var q queries
	q.exclusive(t, r, w)
	q.shared(t, r, w)
	q.queue(w)
	q.row(t, r, k)
	q.session(table)
	if !records {
		q.clockSession()
	}
	q.free(t, r, "`"+table+"_released`")
	return q
}

// free fills in ForceRelease's statements; t is the quoted lock table, r
// the quoted readers table, x the quoted released table. They run in one
// transaction: the locking reads of the key's row (which every grant of
// the key updates, so no grant runs between them and the commit) and of
// its readers, the tombstones, then the clearing.
func (q *queries) free(t, r, x string) {
	q.freeRow = "SELECT `owner`, `version`, `value`, `ttl_us`, `owner` IS NOT NULL AND `expires_at` > NOW(6) " +
		"FROM " + t + " WHERE `lock_key` = ? FOR UPDATE"
	q.freeReaders = "SELECT `owner`, `version`, `value`, `ttl_us` FROM " + r +
		" WHERE `lock_key` = ? AND `expires_at` > NOW(6) FOR UPDATE"
	q.freeTidy = "DELETE FROM " + x + " WHERE `expires_at` <= NOW(6)"
	q.tombstone = "INSERT INTO " + x + " (`owner`, `lock_key`, `version`, `expires_at`) " +
		"VALUES (?, ?, ?, NOW(6) + INTERVAL ? MICROSECOND) ON DUPLICATE KEY UPDATE `version` = `version`"
	q.freeClear = "UPDATE " + t + " SET `owner` = NULL, `expires_at` = NULL WHERE `lock_key` = ? AND `owner` = ?"
	q.freeClearReaders = "DELETE FROM " + r + " WHERE `lock_key` = ? AND `owner` = ?"
	q.released = "SELECT `owner` FROM " + x + " WHERE `owner` IN (%s)"
}

// free holds of a key row that no unexpired writer holds.
const free = "(`owner` IS NULL OR `expires_at` IS NULL OR `expires_at` <= NOW(6))"

// noneAhead returns the condition, on the key row of the quoted lock table
// t, that no unexpired ticket in the quoted queue table w that blocks the
// request is below the attempt's: its parameters are the bound
// (sqlcore.Attempt.Bound) and whether every ticket blocks
// (sqlcore.BlockedByAll) or only writers' (mode 0). Inside an UPDATE it is
// a locking read of the key's tickets.
func noneAhead(t, w string) string {
	return "NOT EXISTS (SELECT 1 FROM " + w + " AS `w` WHERE `w`.`lock_key` = " + t + ".`lock_key` " +
		"AND `w`.`ticket` < ? AND `w`.`expires_at` > NOW(6) AND (? OR `w`.`mode` = 0))"
}

// exclusive fills in the lease strategy's statements on key rows, and
// holders; t is the quoted lock table, r the quoted readers table, w the
// quoted queue table.
func (q *queries) exclusive(t, r, w string) {
	// An exclusive grant: one statement, true only if the row is free or
	// expired, no unexpired reader remains and no waiter's ticket is
	// ahead. The reader and ticket checks are correlated with the locked
	// row, so they run after InnoDB has locked it; inside an UPDATE they
	// are locking reads.
	q.grant = "UPDATE " + t + " SET `owner` = ?, `mode` = 0, `ttl_us` = ?, `value` = ?, " +
		"`version` = LAST_INSERT_ID(`version` + 1), `expires_at` = NOW(6) + INTERVAL ? MICROSECOND " +
		"WHERE `lock_key` = ? AND " + free + " AND NOT EXISTS (SELECT 1 FROM " + r + " AS `r` " +
		"WHERE `r`.`lock_key` = " + t + ".`lock_key` AND `r`.`expires_at` > NOW(6)) AND " + noneAhead(t, w)
	// The first grant of a key creates its row with version 1.
	q.insert = "INSERT IGNORE INTO " + t +
		" (`lock_key`, `owner`, `mode`, `ttl_us`, `value`, `version`, `expires_at`) " +
		"VALUES (?, ?, 0, ?, ?, 1, NOW(6) + INTERVAL ? MICROSECOND)"
	q.release = "UPDATE " + t + " SET `owner` = NULL, `expires_at` = NULL " +
		"WHERE `lock_key` = ? AND `owner` = ? AND `version` = ? AND `expires_at` > NOW(6)"
	q.renew = "UPDATE " + t + " SET `expires_at` = NOW(6) + INTERVAL `ttl_us` MICROSECOND " +
		"WHERE `lock_key` IN (%s) AND `owner` IN (%s) AND `expires_at` > NOW(6)"
	q.alive = "SELECT `owner` FROM " + t +
		" WHERE `lock_key` IN (%s) AND `owner` IN (%s) AND `expires_at` > NOW(6)"
	q.undo = "UPDATE " + t + " SET `owner` = NULL, `expires_at` = NULL WHERE `lock_key` = ? AND " +
		"`owner` = ?"
	// The holders of a key: its unexpired writer and readers, in one
	// statement (one read view), in token order.
	q.holders = "SELECT 0, `version`, `value` FROM " + t + " WHERE `lock_key` = ? AND `owner` IS NOT NULL " +
		"AND `expires_at` > NOW(6) UNION ALL SELECT 1, `version`, `value` FROM " + r +
		" WHERE `lock_key` = ? AND `expires_at` > NOW(6) ORDER BY 2"
}

// shared fills in the lease strategy's statements of shared leases; t is
// the quoted lock table, r the quoted readers table, w the quoted queue
// table.
func (q *queries) shared(t, r, w string) {
	// A shared grant bumps the key row's version (so tokens of readers
	// and writers interleave in one sequence) and adds a reader row; the
	// bump is refused while a ticket that blocks it is ahead.
	q.sharedGrant = "UPDATE " + t + " SET `owner` = NULL, `expires_at` = NULL, `mode` = 1, `value` = NULL, " +
		"`version` = LAST_INSERT_ID(`version` + 1) WHERE `lock_key` = ? AND " + free + " AND " + noneAhead(t, w)
	q.sharedInsert = "INSERT IGNORE INTO " + t + " (`lock_key`, `mode`, `version`) VALUES (?, 1, 1)"
	q.readerAdd = "INSERT INTO " + r +
		" (`lock_key`, `owner`, `version`, `ttl_us`, `expires_at`, `value`) VALUES (?, ?, ?, ?, NOW(6) + " +
		"INTERVAL ? MICROSECOND, ?)"
	// A counted reader row is added only while fewer than the limit of
	// unexpired reader rows of the key exist: the SELECT counts them (an
	// aggregate without GROUP BY gives one row, also for none) and
	// HAVING drops that row when the key is full. The readers table is in
	// the SELECT's FROM clause, as MySQL allows for INSERT ... SELECT (not
	// in a subquery, which it refuses). The caller holds the key row's
	// lock, which every shared grant of the key takes first, so the
	// grants before it have committed and two grants cannot both find one
	// permit left; the count reads committed rows (under shared locks in
	// REPEATABLE READ, from a fresh read view in READ COMMITTED), never an
	// older snapshot.
	q.readerAddCounted = "INSERT INTO " + r +
		" (`lock_key`, `owner`, `version`, `ttl_us`, `expires_at`, `value`) SELECT ?, ?, ?, ?, NOW(6) + " +
		"INTERVAL ? MICROSECOND, ? FROM " + r + " AS `c` WHERE `c`.`lock_key` = ? AND " +
		"`c`.`expires_at` > NOW(6) HAVING COUNT(*) < ?"
	q.readerTidy = "DELETE FROM " + r + " WHERE `lock_key` = ? AND `expires_at` <= NOW(6)"
	q.readerRelease = "DELETE FROM " + r +
		" WHERE `lock_key` = ? AND `owner` = ? AND `version` = ? AND `expires_at` > NOW(6)"
	q.readerRenew = "UPDATE " + r + " SET `expires_at` = NOW(6) + INTERVAL `ttl_us` MICROSECOND " +
		"WHERE `lock_key` IN (%s) AND `owner` IN (%s) AND `expires_at` > NOW(6)"
	q.readerAlive = "SELECT `owner` FROM " + r +
		" WHERE `lock_key` IN (%s) AND `owner` IN (%s) AND `expires_at` > NOW(6)"
	q.readerUndo = "DELETE FROM " + r + " WHERE `lock_key` = ? AND `owner` = ?"
}

// queue fills in the statements of the lease strategy's waiters' tickets;
// w is the quoted queue table.
func (q *queries) queue(w string) {
	q.queueTidy = "DELETE FROM " + w + " WHERE `lock_key` = ? AND `expires_at` <= NOW(6)"
	q.enqueue = "INSERT INTO " + w + " (`lock_key`, `owner`, `mode`, `expires_at`) " +
		"VALUES (?, ?, ?, NOW(6) + INTERVAL ? MICROSECOND)"
	q.queueRefresh = "UPDATE " + w + " SET `expires_at` = NOW(6) + INTERVAL ? MICROSECOND " +
		"WHERE `lock_key` = ? AND `owner` LIKE ? AND `expires_at` > NOW(6)"
	// A waiter's place: the blocking tickets ahead of it, and whether its
	// own is unexpired, in one read.
	q.queuePlace = "SELECT COALESCE(SUM(`ticket` < ? AND (? OR `mode` = 0)), 0), COALESCE(SUM(`ticket` = ?), 0) " +
		"FROM " + w + " WHERE `lock_key` = ? AND `ticket` <= ? AND `expires_at` > NOW(6)"
	q.dequeue = "DELETE FROM " + w + " WHERE `lock_key` = ? AND `owner` = ?"
	q.ticketDone = "DELETE FROM " + w + " WHERE `ticket` = ?"
}

// row fills in the row strategy's statements; t is the quoted lock table,
// r the quoted readers table, k the quoted fences table.
func (q *queries) row(t, r, k string) {
	q.rowLock = "SELECT `version` FROM " + t + " WHERE `lock_key` = ? FOR UPDATE"
	q.rowTryLock = "SELECT `version` FROM " + t + " WHERE `lock_key` = ? FOR UPDATE NOWAIT"
	q.rowShare = "SELECT `version` FROM " + t + " WHERE `lock_key` = ? LOCK IN SHARE MODE"
	q.rowEnsure = "INSERT IGNORE INTO " + t + " (`lock_key`) VALUES (?)"
	q.rowToken = "INSERT INTO " + k + " (`lock_key`, `fence`) VALUES (?, 1)" +
		" ON DUPLICATE KEY UPDATE `fence` = LAST_INSERT_ID(`fence` + 1)"
	// A row holder's record, written in its transaction and never
	// committed; rowHolders and rowRecords read it uncommitted. Its
	// owner names the holder's connection (rowOwner), and ttl_us its
	// lease period, for ForceRelease.
	q.rowMark = "UPDATE " + t + " SET `owner` = ?, `mode` = 0, `version` = ?, `value` = ?, `ttl_us` = ? " +
		"WHERE `lock_key` = ?"
	q.rowMarkShared = "INSERT INTO " + r +
		" (`lock_key`, `owner`, `version`, `ttl_us`, `expires_at`, `value`) VALUES (?, ?, ?, ?, NOW(6), ?)"
	q.rowRecords = "SELECT 0, `version`, `value`, `owner`, `ttl_us` FROM " + t +
		" WHERE `lock_key` = ? AND `owner` IS NOT NULL UNION ALL SELECT 1, `version`, `value`, `owner`, `ttl_us` FROM " +
		r + " WHERE `lock_key` = ? ORDER BY 2"
	q.rowHolders = "SELECT 0, `version`, `value` FROM " + t + " WHERE `lock_key` = ? AND `owner` IS NOT NULL " +
		"UNION ALL SELECT 1, `version`, `value` FROM " + r + " WHERE `lock_key` = ? ORDER BY 2"
}

// placeholders returns "?, ?, ..." with n marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

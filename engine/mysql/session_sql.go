package mysql

// The session strategy's statements and stored procedures.

// clockTicks is the server's UTC clock in 8µs ticks since 2025-01-01,
// computed exactly (TIMESTAMPDIFF counts whole microseconds). UTC_TIMESTAMP
// does not depend on the session's time zone, so no daylight saving change
// moves it back.
const clockTicks = "(TIMESTAMPDIFF(MICROSECOND, '2025-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 8)"

// clockNow is the server's clock read when it is evaluated, as text with
// its microseconds (kit.Ticks of it, counted in this process, is the
// token): SYSDATE(6), where UTC_TIMESTAMP(6) is the time the statement
// began, which for a grant that waited in GET_LOCK is before the lock was
// held. SYSDATE is in the session's time zone, which the connections of an
// engine without holder records set to UTC (pinConn), so that no daylight
// saving change moves it back. A server started with --sysdate-is-now
// makes SYSDATE the statement's start too: such a server must not be used
// without records. (Counting the ticks in this process leaves the server
// the lock and one clock read per grant, as on PostgreSQL; UNIX_TIMESTAMP
// would do as well, but MariaDB before 11.5 has it NULL after
// 2038-01-19.)
const clockNow = "CAST(SYSDATE(6) AS CHAR)"

// sessionGrant returns the session strategy's grant of lock name ?1 for
// key ?2 with value ?3, on the quoted names table n, written under the lock
// taken by cond: one statement, INSERT ... SELECT ... WHERE cond, that
// inserts or updates the name's row only if cond (GET_LOCK) granted the
// lock, so that it affects no row when it did not, and otherwise leaves
// the token as LAST_INSERT_ID, which the server returns with the answer:
//
//   - the token is max(counter + 1, clockTicks), kept in the name's row of
//     "<table>_names", a MEMORY table: a counter the server loses (any
//     restart or crash empties the table; a row the sweep deleted) starts
//     again above every token before it, as long as the server's clock
//     does not step back across the loss and no name is granted more than
//     once per 8µs on average; GET_LOCK orders a name's grants. Keys whose
//     names collide share a counter, which still increases for each;
//   - so nothing is flushed to disk per grant (a MEMORY table has no redo
//     log);
//   - the row also names the holder (CONNECTION_ID, key, value, and ?4,
//     the connection's wait_timeout if it is a shared one, 0 if pinned to
//     the lease), for Holders, List and ForceRelease: the holder of a name
//     is always its last grant, and the row counts only while that
//     connection holds the name (IS_USED_LOCK), so a release need not
//     touch it. released, the token of the last force release, is left
//     alone.
//
// A MEMORY table is locked whole for each statement, which is why cond
// never waits here: a TryLock's GET_LOCK(name, 0). A wait runs GET_LOCK
// first, in a statement of its own (sessionWaitProc).
func sessionGrant(n, cond string) string {
	return "INSERT INTO " + n + nameColumns + "SELECT ?, " + firstToken + ", CONNECTION_ID(), ?, ?, ? FROM DUAL WHERE " +
		cond + nameUpsert
}

// nameColumns, firstToken and nameUpsert are the parts of a grant's write
// to the names table: the columns, a first grant's token, and the update
// of a name's row that exists (the next token, the new holder).
const (
	nameColumns = " (`name`, `token`, `conn`, `lock_key`, `value`, `idle_s`) "
	firstToken  = "LAST_INSERT_ID(GREATEST(1, " + clockTicks + "))"
	nameUpsert  = " ON DUPLICATE KEY UPDATE `token` = LAST_INSERT_ID(GREATEST(`token` + 1, VALUES(`token`))), " +
		"`conn` = VALUES(`conn`), `lock_key` = VALUES(`lock_key`), `value` = VALUES(`value`), `idle_s` = VALUES(`idle_s`)"
)

// sessionWaitProc returns the CREATE PROCEDURE statement of the session
// strategy's waiting grant, "<table>_grant2": one CALL, so one round trip,
// that waits up to w seconds in GET_LOCK(n, w), which locks no table, and
// if it was granted runs sessionGrant's statement (its condition true);
// it answers GET_LOCK's result (1, 0 on timeout, NULL on error) and the
// token (0 when not granted). Its connection is pinned to the lease, so the
// holder row's idle_s is 0. ("_grant1", of earlier versions, left idle_s
// alone.)
func sessionWaitProc(table string) string {
	n := "`" + table + "_names`"
	return "CREATE PROCEDURE IF NOT EXISTS `" + table + "_grant2`(IN n VARBINARY(64), IN w DOUBLE, " +
		"IN k VARBINARY(512), IN v VARBINARY(256)) MODIFIES SQL DATA BEGIN " +
		"DECLARE g INT DEFAULT NULL; DECLARE t BIGINT UNSIGNED DEFAULT 0; " +
		"SET g = GET_LOCK(n, w); " +
		"IF g = 1 THEN " +
		"INSERT INTO " + n + nameColumns + "VALUES (n, " + firstToken + ", CONNECTION_ID(), k, v, 0)" + nameUpsert + "; " +
		"SET t = LAST_INSERT_ID(); " +
		"END IF; " +
		"SELECT g, t; END"
}

// sessionKillProc returns the CREATE PROCEDURE statement of the force
// release, "<table>_kill1": if connection c still holds lock name n with
// the lease of token t, it records t as the name's released token (the
// holder reads it when its connection breaks) and kills the connection,
// which frees the name; it answers 1, or 0 when the lease had already
// ended. The check and the KILL run on the server, a statement apart, so
// a connection that let the lease go and took another one in between is
// not killed for it, except within that gap.
func sessionKillProc(table string) string {
	n := "`" + table + "_names`"
	return "CREATE PROCEDURE IF NOT EXISTS `" + table + "_kill1`(IN n VARBINARY(64), IN c BIGINT UNSIGNED, " +
		"IN t BIGINT UNSIGNED) MODIFIES SQL DATA BEGIN " +
		"IF IS_USED_LOCK(n) = c THEN " +
		"UPDATE " + n + " SET `released` = t WHERE `name` = n AND `conn` = c AND `token` = t; " +
		"IF ROW_COUNT() = 1 AND IS_USED_LOCK(n) = c THEN KILL CONNECTION c; SELECT 1; ELSE SELECT 0; END IF; " +
		"ELSE SELECT 0; END IF; END"
}

// procedures returns the statements that create the session strategy's
// stored procedures. Their names carry a version, so that a release that
// changes one creates it under a new name instead of running an old body.
func procedures(table string) []string {
	return []string{sessionWaitProc(table), sessionKillProc(table)}
}

// session fills in the session strategy's statements on table.
func (q *queries) session(table string) {
	n := "`" + table + "_names`"
	q.sessTry = sessionGrant(n, "GET_LOCK(?, 0) = 1")
	q.sessWait = "CALL `" + table + "_grant2`(?, ?, ?, ?)"
	q.sessKill = "CALL `" + table + "_kill1`(?, ?, ?)"
	q.sessRelease = "SELECT RELEASE_LOCK(?)"
	// The rows that count: those whose connection holds their lock name
	// now.
	held := "IS_USED_LOCK(`name`) = `conn`"
	q.sessHolders = "SELECT 0, `token`, `value` FROM " + n + " WHERE `name` = ? AND `lock_key` = ? AND " + held
	q.sessHolder = "SELECT `conn`, `token`, `value`, `idle_s` FROM " + n + " WHERE `name` = ? AND `lock_key` = ? AND " + held
	// A shared connection's holder is revoked, not killed: its token is
	// recorded as released, and the holder's next ping reads it
	// (sessRevoked) and lets the name go.
	q.sessRevoke = "UPDATE " + n + " SET `released` = `token` WHERE `name` = ? AND `conn` = ? AND `token` = ? AND " + held
	q.sessRevoked = "SELECT `name`, `token` FROM " + n + " WHERE `conn` = ? AND `released` = `token`"
	q.sessReleased = "SELECT `name`, `released` FROM " + n + " WHERE `released` <> 0"
	q.sessStill = "SELECT COUNT(*) FROM " + n + " WHERE `name` = ? AND `conn` = ? AND `token` = ? AND " + held
	q.sessList = "SELECT `lock_key`, 0, `token`, `value`, NULL FROM " + n + " WHERE " + held
	q.sessMarked = "SELECT `released` FROM " + n + " WHERE `name` = ?"
	// Rows of names nobody holds whose counters are behind the clock: the
	// next grant's clock floor is above them, so deleting them loses no
	// order.
	q.sessSweep = "DELETE FROM " + n + " WHERE IS_USED_LOCK(`name`) IS NULL AND `token` < " + clockTicks
}

// clockSession replaces the session strategy's grants with those of an
// engine without holder records (WithHolderRecords(false)), which write
// nothing:
//
//   - a grant, the try and the wait alike, is one SELECT of GET_LOCK(?1,
//     ?2) (a wait of ?2 seconds, 0 for the try) that answers, if it
//     granted, the server's clock read once the lock is held (clockNow),
//     whose 8µs ticks are the token (clockAnswer), and '0' if it did not
//     (the wait ran out, or GET_LOCK failed: NULL); IF evaluates its
//     condition before the branch it picks. (A CASE on GET_LOCK's answer,
//     which told a failure apart, cost about 1.5% of an uncontended cycle
//     more, side by side on fresh connections; a failed GET_LOCK did not
//     take the lock either.)
//   - the release is sessRelease's RELEASE_LOCK, sent once the lease's
//     free time has passed (kit.FreeAt: at most a tick and a microsecond
//     after the grant's answer; releaseName). (A release that asked the
//     server to compare its clock with the token's tick instead,
//     IF(SYSDATE(6) >= end, RELEASE_LOCK(name), -1), cost an uncontended
//     cycle about as much as this wait does, 8-10% against a bare
//     RELEASE_LOCK, side by side on fresh connections; but the wait costs
//     a lease held longer than a tick nothing, and leaves the server the
//     bare statement.)
//
// A connection the engine drops, which frees its names, is dropped no
// sooner than kit.ClockGuard after the engine decides to (discard), which
// is after the last grant's answer. So the next grant of the name, which
// reads the clock only once it holds the name, reads a later tick, and
// tokens strictly increase as long as the server's clock runs at the rate
// of this process's and does not step back (see the package documentation,
// "Tokens without records").
func (q *queries) clockSession() {
	q.sessClockGrant = "SELECT IF(GET_LOCK(?, ?), " + clockNow + ", '0')"
}

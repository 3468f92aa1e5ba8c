package mysql

// The session strategy's statements and stored procedures.

// sessionGrantProc returns the CREATE PROCEDURE statement of the session
// strategy's grant, "<table>_grant1": one CALL, so one round trip, that
// takes the lock name n with GET_LOCK(n, w) (w seconds; 0 for a TryLock)
// and, if it was granted, draws the token and records the holder; it
// answers GET_LOCK's result (1, 0 on timeout, NULL on error) and the token
// (0 when not granted). Each statement runs after the one before it, so
// the lock is held before anything is written, and no table is locked
// while GET_LOCK waits (a single statement would hold the MEMORY tables'
// table locks for the whole wait):
//
//   - the token is max(counter + 1, the server's UTC clock in 8µs ticks
//     since 2025-01-01), in "<table>_names", a MEMORY table keyed by lock
//     name: a counter the server loses (any restart or crash empties the
//     table, a row deleted) starts again above every token before it, as
//     long as the server's clock does not step back across the loss and
//     no name is granted more than once per 8µs on average; GET_LOCK
//     orders a name's grants. Keys whose names collide share a counter,
//     which still increases for each. UTC_TIMESTAMP does not depend on
//     the session's time zone;
//   - so nothing is flushed to disk per grant (a MEMORY table has no
//     redo log);
//   - the holder row, in "<table>_sessions", is keyed by CONNECTION_ID():
//     the grant replaces the row of the connection's last lease, and the
//     row counts as a holder only while its connection holds the lock
//     name (IS_USED_LOCK), so a release need not touch it.
func sessionGrantProc(table string) string {
	n, s := "`"+table+"_names`", "`"+table+"_sessions`"
	return "CREATE PROCEDURE IF NOT EXISTS `" + table + "_grant1`(IN n VARBINARY(64), IN w DOUBLE, " +
		"IN k VARBINARY(512), IN v VARBINARY(256)) MODIFIES SQL DATA BEGIN " +
		"DECLARE g INT DEFAULT NULL; DECLARE t BIGINT UNSIGNED DEFAULT 0; " +
		"SET g = GET_LOCK(n, w); " +
		"IF g = 1 THEN " +
		"INSERT INTO " + n + " (`name`, `token`) VALUES (n, LAST_INSERT_ID(GREATEST(1, " +
		"TIMESTAMPDIFF(MICROSECOND, '2025-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 8))) " +
		"ON DUPLICATE KEY UPDATE `token` = LAST_INSERT_ID(GREATEST(`token` + 1, VALUES(`token`))); " +
		"SET t = LAST_INSERT_ID(); " +
		"INSERT INTO " + s + " (`conn`, `name`, `lock_key`, `token`, `value`, `released`) " +
		"VALUES (CONNECTION_ID(), n, k, t, v, 0) ON DUPLICATE KEY UPDATE `name` = VALUES(`name`), " +
		"`lock_key` = VALUES(`lock_key`), `token` = VALUES(`token`), `value` = VALUES(`value`), `released` = 0; " +
		"END IF; " +
		"SELECT g, t; END"
}

// sessionKillProc returns the CREATE PROCEDURE statement of the force
// release, "<table>_kill1": if connection c still holds lock name n with
// the lease of token t, it marks that lease's holder row released (the
// holder reads the mark when its connection breaks) and kills the
// connection, which frees the name; it answers 1, or 0 when the lease had
// already ended. The check and the KILL run on the server, one statement
// apart, so a connection that let the lease go and took another one in
// between is not killed for it, except within that gap.
func sessionKillProc(table string) string {
	s := "`" + table + "_sessions`"
	return "CREATE PROCEDURE IF NOT EXISTS `" + table + "_kill1`(IN n VARBINARY(64), IN c BIGINT UNSIGNED, " +
		"IN t BIGINT UNSIGNED) MODIFIES SQL DATA BEGIN " +
		"IF IS_USED_LOCK(n) = c THEN " +
		"UPDATE " + s + " SET `released` = 1 WHERE `conn` = c AND `token` = t AND `name` = n; " +
		"IF ROW_COUNT() = 1 AND IS_USED_LOCK(n) = c THEN KILL CONNECTION c; SELECT 1; ELSE SELECT 0; END IF; " +
		"ELSE SELECT 0; END IF; END"
}

// procedures returns the statements that create the session strategy's
// stored procedures. Their names carry a version, so that a release that
// changes one creates it under a new name instead of running an old body.
func procedures(table string) []string {
	return []string{sessionGrantProc(table), sessionKillProc(table)}
}

// session fills in the session strategy's statements on table.
func (q *queries) session(table string) {
	s := "`" + table + "_sessions`"
	q.sessGrant = "CALL `" + table + "_grant1`(?, ?, ?, ?)"
	q.sessKill = "CALL `" + table + "_kill1`(?, ?, ?)"
	q.sessRelease = "SELECT RELEASE_LOCK(?)"
	// The holder rows that count: those whose connection holds their
	// lock name now.
	held := "IS_USED_LOCK(`name`) = `conn`"
	q.sessHolders = "SELECT 0, `token`, `value` FROM " + s + " WHERE `name` = ? AND `lock_key` = ? AND " + held
	q.sessHolder = "SELECT `conn`, `token`, `value` FROM " + s + " WHERE `name` = ? AND `lock_key` = ? AND " + held
	q.sessList = "SELECT `lock_key`, 0, `token`, `value`, NULL FROM " + s + " WHERE " + held
	q.sessMarked = "SELECT `released` FROM " + s + " WHERE `conn` = ? AND `token` = ?"
	q.sessSweep = "DELETE FROM " + s + " WHERE NOT (IS_USED_LOCK(`name`) <=> `conn`)"
	q.sessForget = "DELETE FROM " + s + " WHERE `conn` = ?"
}

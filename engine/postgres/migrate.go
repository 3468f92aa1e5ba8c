package postgres

import (
	"context"
	"fmt"

	"github.com/cerberus-go/cerberus/engine"
)

// maxTableLen leaves room for the longest suffix, "_sessions_pkey" (and
// "_holders_key" of older versions), within PostgreSQL's 63-byte
// identifier limit.
const maxTableLen = 48

// checkTable accepts 1 to maxTableLen ASCII letters, digits and
// underscores, not starting with a digit, so that the name can be quoted
// into statements without escaping.
func checkTable(t string) error {
	if t == "" || len(t) > maxTableLen {
		return fmt.Errorf("%w: postgres: table name %q must be 1 to %d characters", engine.ErrInvalidRequest,
			t, maxTableLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return fmt.Errorf("%w: postgres: table name %q may hold only ASCII letters, digits (not first) "+
				"and underscores", engine.ErrInvalidRequest, t)
		}
	}
	return nil
}

// schema returns the statements that create the tables of table:
//
//   - "<table>" and "<table>_readers": the lease strategy's rows (see the
//     package documentation). lock_key is text in the "C" collation, so
//     keys compare byte by byte: "A" and "a" are different locks.
//     expires_at is always computed by the server, now() plus the lease
//     period; ttl_us keeps the period so that one renewal statement
//     extends every lease by its own.
//   - "<table>_queue": the lease strategy's waiters, one ticket each, in
//     identity order, with mode 0 (exclusive) or 1 (shared) and an expiry
//     on the server's clock, refreshed while the waiter waits. Unlogged:
//     a crash that loses the tickets only sends their waiters to the back
//     of the queue.
//   - "<table>_fences": the session strategy's token counter of each key
//     (logged, though grants commit it without waiting for a WAL flush:
//     see sessionGrant), and the key's last exclusive holder: its backend
//     pid, mode, value, idle timeout and advisory lock id, which count
//     only while that backend holds the lock exclusively (so a release
//     writes nothing).
//   - "<table>_released": the lease strategy's tombstones of the leases
//     ForceRelease freed, by owner value, until their periods run out.
//   - "<table>_held": one row per shared session lease, keyed by the
//     holding backend's pid and the key, written under the advisory lock,
//     for Holders. (Versions before it used "<table>_sessions", one row per
//     backend, and "<table>_holders", keyed by owner; Migrate leaves both
//     alone.)
func schema(table string) []string {
	t, r, f, h := quote(table), quote(table+"_readers"), quote(table+"_fences"), quote(table+"_held")
	w := quote(table + "_queue")
	return []string{
		"CREATE TABLE IF NOT EXISTS " + t + " (" +
			"lock_key text COLLATE \"C\" NOT NULL PRIMARY KEY," +
			"owner text NULL," +
			"mode smallint NOT NULL DEFAULT 0," +
			"version bigint NOT NULL DEFAULT 0," +
			"ttl_us bigint NOT NULL DEFAULT 0," +
			"expires_at timestamptz NULL," +
			"value text NULL)",
		"CREATE TABLE IF NOT EXISTS " + r + " (" +
			"lock_key text COLLATE \"C\" NOT NULL," +
			"owner text COLLATE \"C\" NOT NULL," +
			"version bigint NOT NULL," +
			"ttl_us bigint NOT NULL," +
			"expires_at timestamptz NOT NULL," +
			"value text NULL," +
			"PRIMARY KEY (lock_key, owner))",
		"CREATE TABLE IF NOT EXISTS " + f + " (" +
			"lock_key text COLLATE \"C\" NOT NULL PRIMARY KEY," +
			"token bigint NOT NULL)",
		// The last exclusive holder (versions before it kept every
		// holder in "<table>_held"). lock_id is the advisory lock's key,
		// constant for a row, so the grant's update of a row stays HOT;
		// List joins pg_locks on it. Only while the index is missing:
		// ALTER TABLE and CREATE INDEX lock the table even when there is
		// nothing to do, and every process's start migrates, beside other
		// processes' grants.
		"DO $$ BEGIN IF to_regclass('" + quote(table+"_fences_lock") + "') IS NULL THEN " +
			"ALTER TABLE " + f + " ADD COLUMN IF NOT EXISTS pid integer NULL, " +
			"ADD COLUMN IF NOT EXISTS mode smallint NULL, ADD COLUMN IF NOT EXISTS value text NULL, " +
			"ADD COLUMN IF NOT EXISTS idle_ms bigint NULL, ADD COLUMN IF NOT EXISTS lock_id bigint NULL; " +
			"CREATE INDEX IF NOT EXISTS " + quote(table+"_fences_lock") + " ON " + f + " (lock_id); " +
			"END IF; END $$",
		// Unlogged: a holder row means something only while its backend
		// holds the advisory lock, which no crash or standby keeps either,
		// so the rows need no WAL, and a release that clears one waits
		// for no log flush. Keyed by backend pid and key: a session holds
		// many leases, at most one per advisory lock key, and a grant
		// overwrites whatever row a crashed backend with the same pid
		// left. No index on lock_key alone: Holders scans.
		"CREATE UNLOGGED TABLE IF NOT EXISTS " + h + " (" +
			"pid integer NOT NULL," +
			"lock_key text COLLATE \"C\" NOT NULL," +
			"mode smallint NOT NULL," +
			"token bigint NOT NULL," +
			"value text NULL," +
			"idle_ms bigint NOT NULL," +
			"PRIMARY KEY (pid, lock_key))",
		// ForceRelease's revocations: the backend pid must release its
		// lease of the key with the token. Unlogged, like the holder rows.
		"CREATE UNLOGGED TABLE IF NOT EXISTS " + quote(table+"_revoked") + " (" +
			"pid integer NOT NULL," +
			"lock_key text COLLATE \"C\" NOT NULL," +
			"token bigint NOT NULL," +
			"PRIMARY KEY (pid, lock_key))",
		"CREATE UNLOGGED TABLE IF NOT EXISTS " + w + " (" +
			"ticket bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY," +
			"lock_key text COLLATE \"C\" NOT NULL," +
			"owner text COLLATE \"C\" NOT NULL," +
			"mode smallint NOT NULL," +
			"expires_at timestamptz NOT NULL)",
		"CREATE INDEX IF NOT EXISTS " + quote(table+"_queue_key") + " ON " + w + " (lock_key, ticket)",
		// Tombstones of the leases an operator freed (ForceRelease), by
		// owner value, each kept until its lease's period has run out
		// after the release, so that the holder's next renewal tells why
		// its lease ended.
		"CREATE TABLE IF NOT EXISTS " + quote(table+"_released") + " (" +
			"owner text COLLATE \"C\" NOT NULL PRIMARY KEY," +
			"lock_key text COLLATE \"C\" NOT NULL," +
			"version bigint NOT NULL," +
			"expires_at timestamptz NOT NULL)",
	}
}

// quote quotes an identifier checkTable accepted (plus a suffix).
func quote(ident string) string { return `"` + ident + `"` }

// Migrate creates the engine's tables if they do not exist: the lock
// table, "<table>_readers" and "<table>_queue" for the lease strategy (whose
// statements name the queue table: run Migrate after upgrading from a
// version without it), "<table>_fences" and
// "<table>_held" for the session strategy (both, whatever the engine's
// strategy) and "<table>_released" for the lease strategy's tombstones of
// ForceRelease (on tables without it, everything but ForceRelease works,
// and a released lease is told engine.ErrLeaseLost instead of
// engine.ErrReleasedByOperator). It runs in one transaction under a transaction-level advisory
// lock, so it is idempotent and safe to run from many processes at once
// (CREATE TABLE IF NOT EXISTS alone is not, on PostgreSQL), and it needs
// no session state, so it works behind PgBouncer too.
func (e *Engine) Migrate(ctx context.Context) error {
	if e.frame.Closed() {
		return engine.ErrClosed
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return e.opErr(ctx, "migrate", "", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)",
		keyHash(e.cfg.table, "cerberus migrate")); err != nil {
		return e.opErr(ctx, "migrate", "", err)
	}
	for _, stmt := range schema(e.cfg.table) {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return e.opErr(ctx, "migrate", "", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return e.opErr(ctx, "migrate", "", err)
	}
	return nil
}

// queries are the engine's statements with the table names filled in.
type queries struct {
	// lease strategy
	lockRow, grant, sharedTidy, sharedAdd, sharedBump string
	release, readerRelease, renew, readerRenew        string
	undo, readerUndo, holders                         string
	ticketDone, enqueue, queued, dequeue              string
	freeLock, free, released                          string
	// session strategy
	grantWait, grantWaitShared, grantTry, grantTryShared string
	releaseExclusive, releaseShared, sessionHolders      string
	sessionTidy, deadTidy                                string
	revoke, revoked, stillHeld, unrevoke                 string

	// muxTry is the shared backends' try-grant, by [shared][setIdle]
	// (grantStatement); muxRelease their releases, by shared.
	muxTry     [2][2]string
	muxRelease [2]string
}

// buildQueries returns the statements on table and its "_readers",
// "_fences" and "_held" tables; without records, the session strategy's
// grants and releases are those of clockSession.
func buildQueries(table string, records bool) queries {
	var q queries
	q.lease(quote(table), quote(table+"_readers"), quote(table+"_queue"))
	q.queue(quote(table), quote(table+"_readers"), quote(table+"_queue"))
	q.session(quote(table+"_fences"), quote(table+"_held"), quote(table+"_revoked"))
	if !records {
		q.clockSession()
	}
	q.forceRelease(quote(table), quote(table+"_readers"), quote(table+"_released"))
	return q
}

// forceRelease fills in ForceRelease's statements; t is the quoted lock table,
// r the quoted readers table, x the quoted released table. They run in
// one transaction: freeLock locks the key's row (every grant of the key
// locks it first, so none runs between it and the commit), then free, in
// one statement, clears the key's unexpired writer and deletes its
// readers, writes the tombstones of those that were unexpired, deletes
// expired tombstones and returns what it freed.
func (q *queries) forceRelease(t, r, x string) {
	q.freeLock = "SELECT 1 FROM " + t + " WHERE lock_key = $1 FOR UPDATE"
	q.free = "WITH w AS (SELECT 0 AS mode, owner, version, value, ttl_us FROM " + t +
		" WHERE lock_key = $1 AND owner IS NOT NULL AND expires_at > now()), " +
		"rd AS (DELETE FROM " + r + " WHERE lock_key = $1 " +
		"RETURNING 1 AS mode, owner, version, value, ttl_us, expires_at > now() AS live), " +
		"freed AS (SELECT * FROM w UNION ALL SELECT mode, owner, version, value, ttl_us FROM rd WHERE live), " +
		"clr AS (UPDATE " + t + " SET owner = NULL, expires_at = NULL WHERE lock_key = $1 " +
		"AND owner IN (SELECT owner FROM w)), " +
		"tidy AS (DELETE FROM " + x + " WHERE expires_at <= now()), " +
		"tomb AS (INSERT INTO " + x + " (owner, lock_key, version, expires_at) SELECT owner, $1, version, " +
		"now() + (ttl_us::float8 * interval '1 microsecond') FROM freed ON CONFLICT (owner) DO NOTHING) " +
		"SELECT mode, owner, version, coalesce(value, '') FROM freed"
	q.released = "SELECT owner FROM " + x + " WHERE owner = ANY($1::text[])"
}

// us is $n microseconds as an interval; float8 is exact for every TTL the
// engine accepts.
func us(n int) string { return fmt.Sprintf("($%d::bigint::float8 * interval '1 microsecond')", n) }

// noneAhead is the condition that no unexpired ticket of key $1 in the
// quoted queue table w that blocks the request is below $b (the bound,
// sqlcore.Attempt.Bound): all of them if $all (sqlcore.BlockedByAll),
// else only writers' (mode 0).
func noneAhead(w string, b, all int) string {
	return fmt.Sprintf("NOT EXISTS (SELECT 1 FROM %s AS w WHERE w.lock_key = $1 AND w.ticket < $%d::bigint "+
		"AND w.expires_at > now() AND ($%d::boolean OR w.mode = 0))", w, b, all)
}

// lease fills in the lease strategy's statements; t is the quoted lock
// table, r the quoted readers table, w the quoted queue table.
func (q *queries) lease(t, r, w string) {
	free := "(k.owner IS NULL OR k.expires_at IS NULL OR k.expires_at <= now())"
	// The first statement of every lease-strategy grant: it creates the
	// key's row if it is missing and locks it until the grant's
	// transaction ends, without changing it (ON CONFLICT DO UPDATE locks
	// the row even when its WHERE is false). The statements after it in
	// the same transaction take their snapshots once the lock is held, so
	// they see every grant of the key that committed before (READ
	// COMMITTED takes a snapshot per statement).
	q.lockRow = "INSERT INTO " + t + " AS k (lock_key) VALUES ($1) " +
		"ON CONFLICT (lock_key) DO UPDATE SET version = k.version WHERE false"
	// An exclusive grant: true only if the row is free or expired, no
	// unexpired reader remains and no waiter's ticket is ahead.
	q.grant = "UPDATE " + t + " AS k SET owner = $2::text, mode = 0, ttl_us = $3::bigint, value = $4::text, " +
		"version = k.version + 1, expires_at = now() + " + us(3) + " WHERE k.lock_key = $1 AND " + free +
		" AND NOT EXISTS (SELECT 1 FROM " + r + " AS x WHERE x.lock_key = $1 AND x.expires_at > now()) " +
		"AND " + noneAhead(w, 5, 6) + " RETURNING k.version"
	q.sharedTidy = "DELETE FROM " + r + " WHERE lock_key = $1 AND expires_at <= now()"
	// A shared grant adds a reader row with the key row's next version if
	// no unexpired writer holds the key, no ticket that blocks it is
	// ahead and, when $5 (the Limit) is above 0, fewer than $5 unexpired
	// readers do.
	q.sharedAdd = "INSERT INTO " + r + " (lock_key, owner, version, ttl_us, expires_at, value) " +
		"SELECT $1::text, $2::text, k.version + 1, $3::bigint, now() + " + us(3) + ", $4::text FROM " + t + " AS k " +
		"WHERE k.lock_key = $1 AND " + free + " AND ($5::int = 0 OR (SELECT count(*) FROM " + r +
		" AS c WHERE c.lock_key = $1 AND c.expires_at > now()) < $5::int) AND " + noneAhead(w, 6, 7) +
		" RETURNING version"
	// ... and bumps the key row's version to it, if it did (so that the
	// tokens of readers and writers interleave in one sequence).
	q.sharedBump = "UPDATE " + t + " AS k SET owner = NULL, expires_at = NULL, mode = 1, value = NULL, " +
		"version = k.version + 1 WHERE k.lock_key = $1 AND EXISTS (SELECT 1 FROM " + r +
		" AS x WHERE x.lock_key = $1 AND x.owner = $2)"
	q.release = "UPDATE " + t + " SET owner = NULL, expires_at = NULL " +
		"WHERE lock_key = $1 AND owner = $2 AND version = $3 AND expires_at > now()"
	q.readerRelease = "DELETE FROM " + r +
		" WHERE lock_key = $1 AND owner = $2 AND version = $3 AND expires_at > now()"
	q.undo = "UPDATE " + t + " SET owner = NULL, expires_at = NULL WHERE lock_key = $1 AND owner = $2"
	q.readerUndo = "DELETE FROM " + r + " WHERE lock_key = $1 AND owner = $2"
	q.renew = "UPDATE " + t + " SET expires_at = now() + (ttl_us::float8 * interval '1 microsecond') " +
		"WHERE lock_key = ANY($1::text[]) AND owner = ANY($2::text[]) AND expires_at > now() RETURNING owner"
	q.readerRenew = "UPDATE " + r + " SET expires_at = now() + (ttl_us::float8 * interval '1 microsecond') " +
		"WHERE lock_key = ANY($1::text[]) AND owner = ANY($2::text[]) AND expires_at > now() RETURNING owner"
	// The holders of a key: its unexpired writer and readers, in one
	// statement (one snapshot), in token order.
	q.holders = "SELECT 0::int, version, coalesce(value, '') FROM " + t +
		" WHERE lock_key = $1 AND owner IS NOT NULL AND expires_at > now() " +
		"UNION ALL SELECT 1, version, coalesce(value, '') FROM " + r +
		" WHERE lock_key = $1 AND expires_at > now() ORDER BY 2"
}

// queue fills in the statements of the lease strategy's waiters' tickets;
// t is the quoted lock table, r the quoted readers table, w the quoted
// queue table.
func (q *queries) queue(t, r, w string) {
	// The last statement of a grant made with a ticket ($3): it deletes
	// the ticket if the grant's statement before it in the transaction
	// made owner $2 the key's writer or one of its readers.
	q.ticketDone = "DELETE FROM " + w + " WHERE ticket = $3::bigint AND (EXISTS (SELECT 1 FROM " + t +
		" WHERE lock_key = $1 AND owner = $2) OR EXISTS (SELECT 1 FROM " + r +
		" WHERE lock_key = $1 AND owner = $2))"
	q.enqueue = "WITH tidy AS (DELETE FROM " + w + " WHERE lock_key = $1 AND expires_at <= now()) " +
		"INSERT INTO " + w + " (lock_key, owner, mode, expires_at) VALUES ($1, $2, $3::smallint, now() + " +
		us(4) + ") RETURNING ticket"
	// A waiter's place: the blocking tickets ahead of ticket $2, and
	// whether $2 is unexpired; with $5, the refresh of the engine's
	// tickets (owner LIKE $6) first. The refresh and the count see the
	// same snapshot: the count's expiry test reads the expiries before
	// the refresh, which only extends unexpired ones.
	q.queued = "WITH refresh AS (UPDATE " + w + " SET expires_at = now() + " + us(4) +
		" WHERE $5::boolean AND lock_key = $1 AND owner LIKE $6::text AND expires_at > now()) " +
		"SELECT count(*) FILTER (WHERE ticket < $2::bigint AND ($3::boolean OR mode = 0)), " +
		"count(*) FILTER (WHERE ticket = $2::bigint) FROM " + w +
		" WHERE lock_key = $1 AND ticket <= $2::bigint AND expires_at > now()"
	q.dequeue = "DELETE FROM " + w + " WHERE lock_key = $1 AND owner = $2"
}

// advisoryHeld is pg_locks, as l, narrowed to the granted advisory locks
// of the current database taken with the one-bigint form of
// pg_advisory_lock (objsubid 1): every test of whether a backend holds a
// session lease's lock adds its pid, lock id and mode to it.
const advisoryHeld = "pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND " +
	"l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"

// heldBy is true of the holder row a (a table alias) whose backend holds
// the session strategy's advisory lock of $n (classid) and $n+1 (objid),
// in the row's mode: how pg_locks shows a pg_advisory_lock(bigint) lock.
func heldBy(a string, n int) string {
	return fmt.Sprintf("EXISTS (SELECT 1 FROM "+advisoryHeld+" AND l.pid = %[1]s.pid "+
		"AND l.classid::bigint = $%[2]d AND l.objid::bigint = $%[3]d "+
		"AND l.mode = CASE WHEN %[1]s.mode = 1 THEN 'ShareLock' ELSE 'ExclusiveLock' END)", a, n, n+1)
}

// heldRows is a query of the holders of key $1 whose backend holds its
// lock (classid $2, objid $3) now, with columns cols of each: the shared
// ones' rows in h, and the exclusive one recorded in the key's row of f
// (latest, see latestOf).
func heldRows(f, h, cols string) string {
	return "SELECT " + cols + " FROM " + h + " AS a WHERE a.lock_key = $1 AND " + heldBy("a", 2) +
		" UNION ALL SELECT " + cols + " FROM " + f + " AS a WHERE a.lock_key = $1 AND a.pid IS NOT NULL AND " +
		heldBy("a", 2) + " AND " + latestOf(f, "a")
}

// latestOf is true of the exclusive holder record a in f (a table alias)
// that no later record names the same backend and lock id: under a hash
// collision, a backend that released key a and now holds another key with
// the same lock id shows in pg_locks as holding both. A backend holds one
// lease per lock id at a time, so its later grant, with the larger token
// (tokens follow the server's clock), is the one it holds.
func latestOf(f, a string) string {
	return "NOT EXISTS (SELECT 1 FROM " + f + " AS o WHERE o.lock_id = " + a + ".lock_id AND o.pid = " + a +
		".pid AND o.token > " + a + ".token)"
}

// clockTicks is the server's clock, clock_timestamp(), in 8µs ticks since
// 2025-01-01T00:00:00Z, computed exactly: extract returns numeric (on
// PostgreSQL 14 and later), whose microseconds fit a bigint, and
// 1735689600 * 10^6 is a multiple of 8, so the bigint division is the
// floor for every time after the epoch. It is kit.Ticks of the same
// reading (without the floor of 1), which the statements without holder
// records count in this process instead (see queries.clockSession).
const clockTicks = "((extract(epoch FROM clock_timestamp()) * 1000000)::bigint - 1735689600000000) / 8"

// sessionGrant returns the session strategy's grant: one statement, so one
// round trip, that runs lock (a SELECT of one row, ok, from one of the
// advisory lock functions on $1) and, if ok, sets the session's
// idle_session_timeout to $2 (the lease period in milliseconds, kept after
// the statement), draws the token of key $3 in f and records the holder
// (mode $4, value $5): a shared one in h, an exclusive one in the key's
// row of f, in the same write as the token; it answers ok, the token
// (NULL when not ok) and the session's idle_session_timeout from before,
// for the release. Each step reads the one before it, so the lock is held
// before anything is written:
//
//   - the token is max(counter + 1, the server's clock in 8µs ticks), so
//     a counter the server loses (a crash before the commit reached the
//     disk, a standby promoted without it, a row deleted) starts again
//     above every token before it, as long as the server's clock does not
//     step back across the loss; the advisory lock orders a key's
//     exclusive grants. INSERT ... ON CONFLICT DO UPDATE locks and updates
//     the latest version of the counter row even if it committed after the
//     statement's snapshot (taken before a wait for the lock), so no draw
//     is missed;
//   - so the counter needs no durable commit: the statement sets
//     synchronous_commit off for its own transaction, and a grant waits
//     for no WAL flush;
//   - an exclusive holder is the key's row of f: the grant that draws
//     the token also writes the backend's pid, the mode, the value, the
//     idle timeout and the lock id ($1) there, one HOT update of one row,
//     and the release writes nothing: the record counts only while its
//     backend holds the lock exclusively (heldBy), and the next grant of
//     the key overwrites it (a shared grant clears it);
//   - a shared holder's row in h is keyed by the backend's pid and the
//     key, so the grant replaces a row a crashed backend with the same pid
//     left; the release deletes it (shared holders are many at once, so
//     the key's one row cannot hold them).
func sessionGrant(lock, f, h string, shared bool) string {
	return grantStatement(lock, f, h, grantForm{shared: shared, pinned: true, setIdle: true})
}

// grantForm is what a grant statement does beside the lock and the token.
type grantForm struct {
	shared bool
	// pinned: the statement runs on a pooled connection pinned for one
	// lease, which goes back to the pool: it answers the session's
	// idle_session_timeout from before, for the release to put back, and
	// sets synchronous_commit off for its own transaction only. A shared
	// backend (mux.go) is the engine's alone until it is closed: it
	// turned synchronous_commit off for its whole session when it was
	// opened, and needs no setting put back.
	pinned bool
	// setIdle: the statement sets idle_session_timeout to $2. A shared
	// backend whose session has it at $2 already leaves it (set_config
	// costs about 10µs a statement).
	setIdle bool
}

// grantStatement is sessionGrant in form g; without pinned it answers ok
// and the token only.
func grantStatement(lock, f, h string, g grantForm) string {
	var cur, idle, async, ans string
	if g.pinned {
		cur = ", current_setting('idle_session_timeout') AS idle"
		async, ans = "set_config('synchronous_commit', 'off', true), ", ", l.idle"
	}
	if g.setIdle {
		idle = "set_config('idle_session_timeout', $2, false), "
	}
	q := "WITH l AS MATERIALIZED (SELECT x.ok" + cur + " FROM (" + lock + ") AS x), " +
		"s AS MATERIALIZED (SELECT " + idle + async + clockTicks + " AS c FROM l WHERE l.ok), "
	if !g.shared {
		return q + "t AS (INSERT INTO " + f + " AS f (lock_key, token, pid, mode, value, idle_ms, lock_id) " +
			"SELECT $3::text, greatest(1, s.c), pg_backend_pid(), $4::smallint, $5::text, $2::text::bigint, " +
			"$1::bigint FROM s ON CONFLICT (lock_key) DO UPDATE SET token = greatest(f.token + 1, excluded.token), " +
			"pid = excluded.pid, mode = excluded.mode, value = excluded.value, idle_ms = excluded.idle_ms, " +
			"lock_id = excluded.lock_id RETURNING token) " +
			"SELECT l.ok, (SELECT t.token FROM t)" + ans + " FROM l"
	}
	return q + "t AS (INSERT INTO " + f + " AS f (lock_key, token, lock_id) SELECT $3::text, greatest(1, s.c), " +
		"$1::bigint FROM s ON CONFLICT (lock_key) DO UPDATE SET token = greatest(f.token + 1, excluded.token), " +
		"pid = NULL, mode = NULL, value = NULL, idle_ms = NULL, lock_id = excluded.lock_id RETURNING token), " +
		"r AS (INSERT INTO " + h + " (pid, lock_key, mode, token, value, idle_ms) " +
		"SELECT pg_backend_pid(), $3::text, $4::smallint, t.token, $5::text, $2::text::bigint FROM t " +
		"ON CONFLICT (pid, lock_key) DO UPDATE SET mode = excluded.mode, " +
		"token = excluded.token, value = excluded.value, idle_ms = excluded.idle_ms RETURNING token) " +
		"SELECT l.ok, (SELECT r.token FROM r)" + ans + " FROM l"
}

// clockSession replaces the session strategy's grants and shared releases
// with those of an engine without holder records (WithHolderRecords(false)),
// which write nothing:
//
//   - a shared backend's try is one CASE, whose condition takes the lock
//     with the try function on $1 and whose result, evaluated only once
//     the condition has held, sets the session's idle_session_timeout to
//     $2 (the form that changes it, in a CASE of its own) and reads the
//     server's clock, clock_timestamp(), or NULL when the lock was
//     refused. The token is that reading in 8µs ticks (kit.Ticks), counted
//     in this process from its exact microseconds. (A CASE evaluates its
//     conditions before its results; the MATERIALIZED steps of the
//     statements with records cost a fifth of an uncontended cycle, and
//     counting the ticks on the server, clockTicks, whose numeric
//     arithmetic the server sets up for every statement, a tenth.)
//   - a pinned grant is the lock function on $1 and, if it granted, the
//     session's idle_session_timeout set to $2 and the clock read, in
//     MATERIALIZED steps that read each other, so the clock is read once
//     the lock is held; it answers ok, the clock reading (NULL when not
//     ok) and the idle_session_timeout from before;
//   - a release unlocks $1 only once the server's clock has reached the
//     end of the lease's token's tick (kit.TickEnd), $2 for a shared
//     backend, $3 for a pinned connection (which also puts back its
//     idle_session_timeout, $2): its CASE condition sleeps through the
//     rest of the tick first (in whichever order the server evaluates the
//     condition's two sides, the sleep is for what is left of the tick,
//     nothing once it has passed), and both its results unlock. A
//     release reaches the server a round trip after its grant's clock
//     read, so in practice it never sleeps and costs what the bare unlock
//     does; the same wait in this process (kit.WaitPast) would spin out
//     the rest of kit.ClockGuard on every release sent at once.
//
// A connection the engine closes, which frees its locks, is closed no
// sooner than kit.ClockGuard after the last grant's answer (closeConn).
// So the next grant of the key, which reads the clock only once it holds
// the lock, reads a later tick: tokens strictly increase as long as the
// server's clock does not step back (see the package documentation,
// "Tokens without records").
func (q *queries) clockSession() {
	grant := func(lock string) string {
		return "WITH l AS MATERIALIZED (SELECT x.ok, current_setting('idle_session_timeout') AS idle " +
			"FROM (" + lock + ") AS x), " +
			"s AS MATERIALIZED (SELECT set_config('idle_session_timeout', $2, false), clock_timestamp() " +
			"AS c FROM l WHERE l.ok) SELECT l.ok, (SELECT s.c FROM s), l.idle FROM l"
	}
	q.grantWait = grant("SELECT true AS ok FROM pg_advisory_lock($1::bigint)")
	q.grantWaitShared = grant("SELECT true AS ok FROM pg_advisory_lock_shared($1::bigint)")
	q.grantTry = grant("SELECT g.ok FROM pg_try_advisory_lock($1::bigint) AS g(ok)")
	q.grantTryShared = grant("SELECT g.ok FROM pg_try_advisory_lock_shared($1::bigint) AS g(ok)")
	for i, lock := range []string{"pg_try_advisory_lock", "pg_try_advisory_lock_shared"} {
		q.muxTry[i][0] = "SELECT CASE WHEN " + lock + "($1::bigint) THEN clock_timestamp() END"
		q.muxTry[i][1] = "SELECT CASE WHEN " + lock + "($1::bigint) THEN CASE WHEN " +
			"set_config('idle_session_timeout', $2, false) IS NOT NULL THEN clock_timestamp() END END"
	}
	q.muxRelease[0] = "SELECT " + afterTick("$2", "pg_advisory_unlock($1::bigint)")
	q.muxRelease[1] = "SELECT " + afterTick("$2", "pg_advisory_unlock_shared($1::bigint)")
	q.releaseExclusive = "SELECT " + afterTick("$3", "pg_advisory_unlock($1::bigint)") +
		", set_config('idle_session_timeout', $2, false)"
	q.releaseShared = "SELECT " + afterTick("$3", "pg_advisory_unlock_shared($1::bigint)") +
		", set_config('idle_session_timeout', $2, false)"
}

// afterTick is a CASE that runs unlock once the server's clock has
// reached end (a timestamptz parameter: kit.TickEnd of the lease's token),
// so reads a later tick than the token's: its condition, which a CASE
// evaluates before either result, sleeps for what is left until end while
// the clock has not reached it.
func afterTick(end, unlock string) string {
	return "CASE WHEN clock_timestamp() >= " + end + "::timestamptz OR " +
		"pg_sleep(extract(epoch FROM " + end + "::timestamptz - clock_timestamp())::float8)::text = '' " +
		"THEN " + unlock + " ELSE " + unlock + " END"
}

// session fills in the session strategy's statements; f is the quoted
// fences table, h the quoted holders table.
func (q *queries) session(f, h, v string) {
	q.grantWait = sessionGrant("SELECT true AS ok FROM pg_advisory_lock($1::bigint)", f, h, false)
	q.grantWaitShared = sessionGrant("SELECT true AS ok FROM pg_advisory_lock_shared($1::bigint)", f, h, true)
	q.grantTry = sessionGrant("SELECT g.ok FROM pg_try_advisory_lock($1::bigint) AS g(ok)", f, h, false)
	q.grantTryShared = sessionGrant("SELECT g.ok FROM pg_try_advisory_lock_shared($1::bigint) AS g(ok)", f, h,
		true)
	for i, lock := range []string{"pg_try_advisory_lock", "pg_try_advisory_lock_shared"} {
		for j := range 2 {
			q.muxTry[i][j] = grantStatement("SELECT g.ok FROM "+lock+"($1::bigint) AS g(ok)", f, h,
				grantForm{shared: i == 1, setIdle: j == 1})
		}
	}
	// A shared backend's releases leave its idle_session_timeout armed:
	// its pinger resets it once the backend holds nothing (mux.go).
	q.muxRelease[0] = "SELECT pg_advisory_unlock($1::bigint)"
	q.muxRelease[1] = "WITH d AS (DELETE FROM " + h + " WHERE pid = pg_backend_pid() AND lock_key = $2::text) " +
		"SELECT pg_advisory_unlock_shared($1::bigint)"
	// A pinned connection's releases: unlock $1 and set the session's
	// idle_session_timeout back to $2, as the grant found it; a shared one
	// also deletes the session's holder row of key $3. An exclusive one
	// writes nothing (see sessionGrant). A revocation left behind
	// (ForceRelease deletes its own) names a token no later lease has, and
	// goes with the session's tidy.
	q.releaseExclusive = "SELECT pg_advisory_unlock($1::bigint), set_config('idle_session_timeout', $2, false)"
	q.releaseShared = "WITH d AS (DELETE FROM " + h + " WHERE pid = pg_backend_pid() AND lock_key = $3::text) " +
		"SELECT pg_advisory_unlock_shared($1::bigint), set_config('idle_session_timeout', $2, false)"
	// A closing shared backend deletes its holder rows and revocations; a
	// new one those of every backend that has ended.
	q.sessionTidy = "WITH v AS (DELETE FROM " + v + " WHERE pid = pg_backend_pid()) " +
		"DELETE FROM " + h + " WHERE pid = pg_backend_pid()"
	q.deadTidy = "WITH v AS (DELETE FROM " + v + " AS v WHERE NOT EXISTS " +
		"(SELECT 1 FROM pg_stat_activity a WHERE a.pid = v.pid)) " +
		"DELETE FROM " + h + " AS h WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = h.pid)"
	// ForceRelease: the holders of key $1 whose backend holds its lock
	// (classid $2, objid $3) now, each given a revocation in the same
	// statement, in token order.
	q.revoke = "WITH x AS (" + heldRows(f, h, "a.pid, a.mode, a.token, coalesce(a.value, '') AS value, "+
		"coalesce(a.idle_ms, 0) AS idle_ms") + "), " +
		"r AS (INSERT INTO " + v + " (pid, lock_key, token) SELECT pid, $1, token FROM x " +
		"ON CONFLICT (pid, lock_key) DO UPDATE SET token = excluded.token) " +
		"SELECT pid, mode::int, token, value, idle_ms FROM x ORDER BY token"
	// A ping that also reads the session's revocations.
	q.revoked = "SELECT lock_key, token FROM " + v + " WHERE pid = pg_backend_pid()"
	// Which of the backends $4 still hold the lock (classid $2, objid $3)
	// of key $1.
	q.stillHeld = "SELECT h.pid FROM unnest($4::int[]) AS h(pid) WHERE $1::text <> '' AND EXISTS " +
		"(SELECT 1 FROM " + advisoryHeld + " AND l.pid = h.pid AND l.classid::bigint = $2 AND l.objid::bigint = $3)"
	q.unrevoke = "DELETE FROM " + v + " WHERE lock_key = $1 AND pid = ANY($2::int[])"
	// The holder rows that count: those whose backend holds the advisory
	// lock now.
	q.sessionHolders = heldRows(f, h, "a.mode::int, a.token, coalesce(a.value, '')") + " ORDER BY 2"
}

// Package postgres is the cerberus engine on PostgreSQL, built on pgx v5
// (github.com/jackc/pgx/v5). The session strategy needs PostgreSQL 14 or
// later (idle_session_timeout); the lease strategy runs on any supported
// version.
//
// # Construction
//
// Open takes a DSN (a postgres:// URL or a libpq key=value string,
// as pgxpool.ParseConfig reads it) and owns its pool; New takes the
// application's *pgxpool.Pool, which the caller keeps: Close leaves it
// open. Neither does I/O; both refuse a bad table name or an unknown
// strategy with engine.ErrInvalidRequest, and Open a DSN it cannot parse
// (without repeating the DSN, which may hold a password). Migrate creates
// the tables once:
//
//	e, err := postgres.Open(dsn, postgres.WithStrategy(postgres.StrategySession))
//	err = e.Migrate(ctx)
//
// # Tables
//
// Migrate creates, under the name WithTable gives (DefaultTable unless it
// says otherwise), five tables; both strategies' tables exist whatever the
// engine's strategy, so the two can be switched without another Migrate:
//
//   - "<table>": the lease strategy's row per key that was ever locked:
//     lock_key (text COLLATE "C", compared byte by byte, so "A" and "a" are
//     different locks), owner (the exclusive holder's owner value, unique
//     per lease), mode, version (bumped by every grant and never reset:
//     the token), ttl_us, expires_at (now() plus the TTL, computed by the
//     server in the granting or renewing statement) and value.
//   - "<table>_readers": one row per shared lease of the lease strategy,
//     keyed by (lock_key, owner), with its own version, expires_at and
//     value.
//   - "<table>_fences": the session strategy's token counter of each key,
//     keyed by the full key, and the key's last exclusive holder (backend
//     pid, mode, value, idle timeout, advisory lock id), written by the
//     grant that draws the token and left in place by the release: it
//     counts only while that backend holds the lock exclusively.
//   - "<table>_released": the lease strategy's tombstones of the leases
//     ForceRelease freed (see Force release).
//   - "<table>_held": one row per shared session lease, keyed by the
//     holding backend's pid and the key: mode, token and value, for
//     Holders. The
//     table is UNLOGGED: a row counts only while its backend holds the
//     advisory lock, which a crash or a promoted standby does not keep
//     either, so the rows need no WAL and a release waits for no log
//     flush. (Versions before it kept "<table>_sessions", a row per
//     backend, and "<table>_holders", keyed by owner; Migrate leaves those
//     tables alone, and an engine of this version does not list the leases
//     of an older one: stop every old process before starting new ones.
//     Exclusive holders moved from "<table>_held" to "<table>_fences" in
//     a later version: run Migrate after upgrading, which adds the
//     columns; an older process's exclusive leases are still listed, from
//     its rows in "<table>_held".)
//
// The two strategies do not exclude each other: every process that locks
// a key must use the same strategy and the same table.
//
// # Session strategy (StrategySession, the default)
//
// A lease is a session-level advisory lock: pg_advisory_lock(k)
// (exclusive) or pg_advisory_lock_shared(k) (shared), held by a server
// session for as long as the lease lives. An Acquire first tries
// pg_try_advisory_lock (or _shared) on one of the engine's session
// connections (WithSessionConns, 2 by default), which it shares with
// every other lease granted that way: one session holds thousands of
// advisory locks, so an engine holds tens of thousands of leases over two
// connections (see Connections). The server refuses the try while another
// session holds the key in a conflicting mode or waits for it ahead, so a
// try never jumps the queue. A TryLock so refused is refused; a waiting
// Acquire then waits in the server's lock manager on a connection pinned
// out of the pool for it alone, which grants in arrival order (a shared
// request waits behind an earlier exclusive one) and wakes it at the
// release without polling; that lease keeps its connection until it ends.
// A key refused to a waiting Acquire within the last second goes straight
// to a pinned connection, so that waiters on a hot key arrive in the
// server's queue as early as they can (the conformance suite's fairness
// check: 8 engines on one key, min/max 0.81 to 0.94 at load 20). Release
// is pg_advisory_unlock (or _shared) on the lease's session.
//
// k is the key's 64-bit hash: the first 8 bytes of SHA-256 of the table
// name, a NUL byte and the key, read as a big-endian int64. The table name
// is in it so that engines on different tables (other applications on the
// same database) never contend. pg_locks shows the lock as locktype
// 'advisory' with classid the high and objid the low 32 bits of k, and
// objsubid 1.
//
// Collisions: two keys with the same hash share one advisory lock, so they
// serialize each other: a TryLock of one may be refused while the other is
// held, and a waiter for one waits for the other's holder. That is false
// contention, never lost exclusion: every holder of a key holds the lock
// that every other holder of the same key needs. Tokens, values and
// Holders are per real key (see below), so a collision never mixes two
// keys' tokens. With 64 bits, a collision among a million live keys has a
// chance of about 3e-8.
//
// One round trip: the lock function, the token and the holder record are
// one statement on the pinned connection. Its first step takes the lock;
// only if it is granted do the later steps set the session's
// idle_session_timeout, set the key's counter in "<table>_fences" to
//
//	max(counter + 1, clock)
//
// (INSERT ... ON CONFLICT (lock_key) DO UPDATE), which is Lease.Token, and
// record the holder: an exclusive one in the same row, a shared one in
// "<table>_held". clock is the server's
// clock_timestamp() in units of 8µs since 2025-01-01T00:00:00Z, read once
// the lock is held (about 7.5e12 in 2026), the rule engine/redis follows.
// The advisory lock orders a key's exclusive grants; shared holders each
// draw a token of their own. A key is granted far less often than 125,000
// times a second (a cycle is a round trip or two; one key takes a few
// thousand uncontended cycles a second on the 2-core test machine), so the
// counter stays at the clock or just above it, and a counter the server
// forgets starts again above every token granted before it. So the
// statement needs no durable commit: it sets synchronous_commit off for its
// own transaction (a session connection has it off for its whole session,
// as nothing it writes needs a flush), and a grant waits for no WAL flush. A crash that loses
// the last grants' commits, a standby promoted before it replayed them, a
// counter row deleted or the table truncated: the next grant draws the
// clock, above them (TestSessionTokensAfterCounterLost,
// TestTokensAfterServerKill). This rests on one assumption: the clock of
// the server that grants first after the loss is not behind the clock of
// the one that granted last before it by more than the time between the
// two grants (a restart does not step the clock back; a promoted
// standby's clock is not behind the old primary's by more than the
// failover took). While the counter is kept, tokens increase whatever the
// clock does. Tokens fit in 48 bits until about 2096.
//
// Connections: the session connections (WithSessionConns) carry every
// lease granted at once, each statement one at a time per connection. A
// grant goes to the connection that holds the fewest leases and, among
// those, to the one the last statement ran on, so that leases spread
// over the connections while a process that takes one lock after another
// talks to one server session (dialled only when first needed); a grant
// that comes while that connection is busy goes to another. Each lease
// that had to wait pins a pool connection of its own while it
// waits and while it is held. The pool (WithMaxConns with Open; the
// pool's MaxConns with New, at least the session connections plus 2)
// holds the session connections, one connection the engine keeps for
// Holders, Ping and Migrate, and the pinned ones; further waits wait,
// cancellably and without a connection, for one to come free. A session
// never holds two leases of one key: advisory locks are reentrant per
// session, so a second lease of a key the engine holds (a share beside a
// share, or an exclusive TryLock) goes to another session connection that
// does not hold it, or to a pinned one, where the server decides as it
// would for another process. The server keeps every advisory lock in its
// shared lock table, max_locks_per_transaction * (max_connections +
// max_prepared_transactions) entries shared by every session (6,400 with
// the defaults, plus some slack; TestScale runs 20,000 leases on a server
// with max_locks_per_transaction=1024): a grant that finds it full fails
// with SQLSTATE 53200, which the engine reports as engine.ErrUnavailable,
// and the session's other leases are untouched. A pinned connection goes
// back to the pool only once its lease has released the lock and put back
// the session's idle_session_timeout; otherwise it is closed, which ends
// its server session and every advisory lock of the session with it.
// Behind PgBouncer, the session strategy needs session pooling; use the
// lease strategy with transaction pooling.
//
// Cancellation: a waiting Acquire whose ctx ends (or whose engine closes)
// sends a cancel request for the pinned backend, which makes the server
// abandon the queued wait; once the lock statement has returned the
// connection is closed rather than put back, which frees the lock should
// the grant have raced the cancel. Acquire returns after at most
// kit.UndoWait; the rest goes on in the background, and Close waits for
// it. A server that answers neither within the op timeout gets the
// connection's socket closed. A grant statement that fails after its lock
// was granted (any error) has its connection closed too, which frees the
// lock.
//
// # Tokens without records
//
// WithHolderRecords(false) (config holder_records: false) trades the
// holder records and the key's counter for the price of a bare advisory
// lock. A grant is one statement that takes the lock and, once it is held,
// sets the session's idle_session_timeout where needed and reads the
// server's clock, clock_timestamp(): that reading, in the same 8µs ticks
// (counted in this process from its microseconds), is the token, and the
// statement writes nothing (no transaction id, no row, no WAL). A release
// unlocks only once the server's clock has passed the lease's token: one
// CASE whose condition sleeps through the rest of the token's tick on the
// server if need be (a release reaches the server a round trip after its
// grant read the clock, so it never has to in practice, and costs what
// the bare unlock does). A connection the engine closes, which frees its
// locks, is closed no sooner than kit.ClockGuard (10µs: a tick, the
// microsecond the reading may be truncated by, and one more) after the
// answer that carried a token came back; the server read its clock before
// it sent that answer, so those locks too are freed in a later tick of
// its clock. So whatever frees the lock, the next grant of the key, which
// reads the clock only once it holds the lock, reads a later tick, and
// tokens strictly increase as long as the server's clock runs at the rate
// of the client's and does not step back (by more than the time between
// two grants of one key). A session the server ends (its idle cut-off,
// pg_terminate_backend, a crash) frees its locks long after their grants. There is no counter to lose: a restart, a crash,
// a restore or a promoted standby change nothing, as long as the new
// server's clock is not behind the old one's by more than the time since
// its last grant. The assumption is stronger than with records, where
// tokens increase whatever the clock does while the counter is kept and
// the clock matters only after a loss: without records a clock stepped
// back while the server runs (by hand, or by a time daemon that steps
// rather than slews) gives lower tokens for as long as the step. Shared
// holders granted within one tick may share a token (they hold at once, and
// a writer after them reads a later tick). Holders, List and ForceRelease
// return an error wrapping errors.ErrUnsupported: nothing on the server
// names a key's holders (pg_locks shows only the lock's 64-bit hash), and
// the engine's ping still reads the revocations table, which nothing
// fills. Every process that locks a key must use the same setting.
//
// # Liveness of the session strategy
//
// The lock lives exactly as long as its session. The lock statement
// sets the session's idle_session_timeout to the lease period (rounded up
// to whole milliseconds; on a session connection, the shortest period of
// the leases it has held since it last held none), so the server ends a
// session that stays idle that long and its locks go with it: a paused
// process loses every lease of a session connection within the shortest
// of their periods, and each lease within its own (TestPausedHolderCutOff:
// a paused holder of 1,001 leases on two connections). On a pinned
// connection, with Request.Renew the lease pings it every third of the
// period, which resets the server's idle clock. A session connection has
// one pinger for all its leases, renewed or not, every third of its idle
// timeout while it holds any (without it a lease with a longer period
// would lose its lock early); each lease's validity there is its
// connection's (below). A session connection's grant sets the timeout
// only when it changes, and its release is the unlock alone: the timeout
// stays set after the last lease leaves, until the pinger's next round
// resets it to the server's own (TestSessionConnIdlesAfterLastRelease).
// Its statements run without a context of their own, bounded instead by
// the deadline of the connection's socket, which is moved to one and a
// half op timeouts ahead whenever less than half of one is left
// (TestSessionConnBoundsStatements): a statement then sets no timer of
// its own (setting one can wake a second OS thread; about a tenth of the
// cycle on the 2-core test machine). A grant whose caller's context can
// never end runs on the caller's goroutine; any other runs on a goroutine
// of its own, so that the caller can leave at its deadline. A failed ping (the connection was killed with
// pg_terminate_backend, the server restarted, the network broke), or one
// that does not answer before the validity runs out, ends the lease, or
// every lease of the session connection, with engine.ErrLeaseLost through
// Done and OnLost, told before the connection is closed. A lease without
// Renew is released by the engine when its period runs out; on a pinned
// connection nothing else is sent (a connection killed meanwhile is found
// then, or at Release), and the server cuts the session at about the same
// time if the process stalls.
//
// The local validity of a lease is anchored at the send time s of the last
// statement that succeeded on its connection (the grant statement, then
// each ping), and Done closes at s + TTL - engine.Margin(TTL). The grant
// statement is sent before any wait for the lock, so when its answer
// takes half the lease's life or more, Acquire pings the connection
// first, and the ping is the anchor. That is never later than the
// server's cut-off:
//
//  1. The server receives that statement at r >= s and completes it at
//     c >= r; only then is the session idle, and only then does the
//     server arm its idle timer, for ceil(TTL) >= TTL. Any later statement
//     only re-arms it later. So the server cannot end the session before
//     c + TTL >= s + TTL.
//  2. The engine's timer measures elapsed time on the monotonic clock from
//     s, and fires at s + TTL - Margin < s + TTL. A ping that has not
//     answered by then fails.
//  3. Hence while Done is open the session, and the lock, is alive on the
//     server, unless something else ended it (a kill, a server restart),
//     which the next ping reports; the fencing token covers the writes in
//     between, as on every engine.
//
// The other way round, a holder that stops talking (SIGSTOP, a long GC
// pause, a frozen VM, a cut network) is cut off by the server at most TTL
// (plus under a millisecond of rounding and the server's timer latency)
// after its last statement completed, and another process is granted the
// key then; a crashed process's socket closes at once, which ends the
// session at once. The idle timeout applies only outside a transaction,
// and the engine never leaves a pinned session in one; while a waiter's
// lock statement runs the session is not idle, so a waiter is never cut
// while it waits, and a stopped waiter that is granted the lock is cut a
// TTL after the grant: when it resumes, the grant's answer is late, the
// ping that would confirm it fails, and it waits again on a new
// connection. A resumed holder's next
// ping fails, and its lease ends with engine.ErrLeaseLost. Limits().Floor
// is 0: idle_session_timeout counts milliseconds, so every lease period in
// [MinTTL, MaxTTL] is honoured.
//
// Force release (ForceRelease, engine.Releaser): an advisory lock can be
// released by its own session only, so the operator records a revocation
// that the holder's next ping reads (a third of its period): the holder
// is told engine.ErrReleasedByOperator, then releases. A holder that has
// not done so within its session's idle timeout (a lease without Renew on
// a pinned connection, which never pings; a stopped process) has its
// backend ended with pg_terminate_backend, which ends every other lease
// of that session too (on a session connection, many). The lease strategy
// frees the key itself (see Force release, below).
//
// The session strategy does not count (Limits().Counted is false, so a
// Request.Limit is refused before any I/O, as with MySQL's row strategy):
// advisory locks are shared or exclusive, with no counted mode. Use the
// lease strategy for semaphores.
//
// Holders for the session strategy reads the key's holder records that
// belong to a backend holding the key's advisory lock now, in that mode (a
// join on pg_locks by pid, database, classid, objid and mode), in token
// order: the exclusive holder in the key's row of "<table>_fences", the
// shared ones in "<table>_held". A record is written in the grant's
// statement, once the lock is held. A shared holder's row is deleted in
// the statement that releases it (a closing engine deletes its session
// connections' rows in one statement each); a holder whose session ended
// without a release (a crash, a kill, the idle cut-off) leaves a row that
// Holders does not list, that the next grant of the key on a backend with
// the same pid overwrites, and that the next session connection an engine
// opens deletes with every row whose backend has ended. An exclusive
// release writes nothing, so a cycle costs the counter's one HOT update
// and no holder row: the record stays until the key's next grant, and
// counts only while its backend holds the lock exclusively and no later
// record names that backend and lock id (under a hash collision, the
// backend may hold the lock for another key).
//
// # Lease strategy (StrategyLease)
//
// The lease strategy is engine/mysql's, in PostgreSQL's SQL. Every grant
// is one batch of statements sent in one round trip and run as one
// transaction: the first statement creates the key's row if it is missing
// and locks it (INSERT ... ON CONFLICT DO UPDATE ... WHERE false, which
// locks without writing), and the statements after it take their
// snapshots once that lock is held, so they see every grant of the key
// that committed before (READ COMMITTED takes a snapshot per statement; a
// single statement would check the readers in a snapshot older than the
// row lock and could miss a reader that committed meanwhile).
//
// An exclusive grant is an UPDATE of the key's row that succeeds only if
// the row has no owner or has expired and no unexpired reader row exists;
// it sets owner, value, expires_at = now() + TTL and version = version +
// 1, RETURNING the version, which is Lease.Token. A shared grant deletes
// the key's expired reader rows, adds its own reader row with the key
// row's next version if no unexpired writer holds the key, and bumps the
// key row's version to it, so that writers and readers share one
// sequence. A counted shared grant (Request.Limit, a semaphore permit)
// adds its row only while fewer than Limit unexpired reader rows of the
// key exist, counted in the same statement: the grants of a key run one
// at a time under the key row's lock, and each counts every permit
// committed before it, so no two grants can both find the last permit
// free, and each permit has a token of its own. Limits().Counted is true.
// Readers do not prefer writers: a writer waits until no unexpired reader
// is left.
//
// Release is an UPDATE (or, for a reader, a DELETE) conditional on the
// lease's owner, its version and expires_at > now(). If it changes
// nothing the lease had lost the key: Release returns engine.ErrNotHeld.
//
// With Request.Renew one goroutine per engine renews every held lease with
// one UPDATE ... RETURNING owner per table per interval (a third of the
// shortest TTL held), for up to 2000 leases per statement; a lease the
// statement does not return has lost its key and ends with
// engine.ErrLeaseLost, and so does one whose last successful renewal is a
// TTL old, less engine.Margin, while the server cannot be reached. Without
// Renew the client ends the lease from a timer of the TTL less
// engine.Margin, started before the grant was sent. The client's clock is
// never compared with the server's: every expiry test is expires_at <=
// now() on the server, and the client measures elapsed time only.
//
// Waiting queues, in arrival order across processes: a waiter refused
// once inserts a ticket into "<table>_queue" (an unlogged table; an
// identity number, an expiry on now()), and every grant batch is refused
// while an unexpired ticket of the key ahead of the attempt's own blocks
// it (any ticket for an exclusive or counted request, only writers' for a
// plain shared one, so readers at the head go together); the grant
// deletes the winner's ticket in its own transaction, a cancelled wait in
// the background. A crashed waiter's ticket expires 2s (or four times the
// longest backoff) after its last refresh and is skipped from then on.
// Only the head of the queue polls with grant attempts: eight at half the
// first delay of WithBackoff (2.5ms), then doubling to its longest
// (200ms); the others read their place with one statement, which also
// refreshes the engine's tickets on the key a third of the way through
// their life. Within one engine only the first waiter on a key polls, and
// a release by the same engine wakes it at once. 8 engines on one hot key
// get 37 to 39 grants each (the conformance suite's fairness check,
// min/max 0.95; 0.17 without the queue). Fairness costs throughput (the
// key is idle between a release and the head's next attempt); see
// docs/benchmarks.md. The session strategy, which queues waiters
// inside the server, hands over faster. Run Migrate after upgrading: the
// grants name the queue table.
//
// The lease strategy keeps no session state: no advisory locks, no
// LISTEN, no SET, and every statement or batch is one self-contained
// transaction, so it works behind PgBouncer in transaction mode. pgx's
// default statement cache uses prepared statements: behind PgBouncer
// older than 1.21 (or without max_prepared_statements), add
// default_query_exec_mode=exec (or simple_protocol) to the DSN.
//
// # Force release
//
// With the lease strategy, ForceRelease (engine.Releaser) frees a key
// whoever holds it in one round trip: a batch, one transaction, that locks
// the key row (every grant of the key locks it first) and then, in one
// statement, clears the unexpired writer, deletes the reader rows, deletes
// expired tombstones and writes a tombstone per freed lease into
// "<table>_released" (owner value, key, token, expiry its TTL from now()),
// which Migrate creates; on tables without it ForceRelease fails with an
// *engine.OpError and changes nothing. The version stays, so the next
// grant's token is above. Waiters of other processes are granted at their
// next poll, the engine's own at once. A holder in another process is told
// at its next renewal (a third of its TTL): the renewal finds its row
// gone, reads the tombstones of the leases it lost (one more SELECT, only
// then) and ends those named with engine.ErrReleasedByOperator. A holder
// stopped (SIGSTOP) through the release is told at its first renewal after
// it resumes, unless its TTL ran out meanwhile: then its own clock ends it
// first, with engine.ErrLeaseLost. Its Release and renewals are
// conditional on its owner value and find nothing: engine.ErrNotHeld, and
// the next holder's row is left alone. The session strategy's force
// release is described with that strategy, above.
//
// # Holders and Watch
//
// Holders (engine.Inspector) is one statement for either strategy (see
// above for each). The engine does not implement engine.Watcher: the
// lease strategy must work behind PgBouncer, where LISTEN does not, and the
// root package re-reads Holders on a bounded interval for an engine
// without Watch.
//
// # Errors
//
// Errors are *engine.OpError values naming the engine, the operation and
// the key; neither they nor anything else the engine reports contains the
// DSN or the password (pgx names the user and the database only). They
// wrap engine.ErrUnavailable when the server is not serving now: no
// connection (refused, reset, closed, TLS failures), pgconn timeouts, the
// engine's own op timeout (WithOpTimeout), SQLSTATE class 08 (connection
// exception), 57P01 and 57P02 (admin or crash shutdown), 57P03 (cannot
// connect now) and 53300 (too many connections). They wrap
// engine.ErrAccessDenied, and not engine.ErrUnavailable, for refusals by
// access control: 28000 (invalid authorization, such as an unknown role or
// a pg_hba rejection), 28P01 (wrong password) and 42501 (insufficient
// privilege). Other server errors, such as a missing table, wrap neither,
// and nothing does once the caller's context has ended.
//
// # Limits
//
// Keys are 1 to MaxKeyLen (512) bytes of valid UTF-8 without control
// characters; TTLs are engine.MinTTL to engine.MaxTTL; Request.Value is
// stored with the lease and listed by Holders. Limits().Floor is 0 for
// both strategies; Limits().Counted is true for the lease strategy only.
package postgres

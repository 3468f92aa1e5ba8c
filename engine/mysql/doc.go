// Package mysql is the cerberus engine on MySQL (8.4) and MariaDB (10.11),
// for applications on gorm and go-sql-driver/mysql. It uses nothing only one
// of the two servers has.
//
// # Construction
//
// New takes the application's *gorm.DB (any Pool: something with a
// DB() (*sql.DB, error) method), which the caller keeps: Close leaves it
// open. Open takes a DSN and owns its pool. Neither does I/O; both refuse a
// bad table name or an unknown strategy name. Migrate creates the tables
// once:
//
//	e, err := mysql.New(gormDB, mysql.WithTable("locks"))
//	err = e.Migrate(ctx)
//
// The engine sends its statements straight to the *sql.DB under the gorm
// handle: that saves gorm's callback chain on every lock operation, and
// keeps gorm out of the build of anyone who uses the engine without it.
// Fenced writes with gorm live in the subpackage fence. Errors are
// *engine.OpError values naming the engine, the operation and the key;
// neither they nor anything else the engine reports contains the DSN.
// They wrap engine.ErrUnavailable when the server is not serving now: no
// connection, a broken or bad one (driver.ErrBadConn), TLS failures, the
// engine's own statement timeout (WithOpTimeout), and the server errors
// 1040 (too many connections), 1053 and 1077 (shutdown), 1152 and 1184
// (aborted connection), 1203 (too many user connections), 1927 (connection
// killed), 2006 and 2013 (server gone). They wrap engine.ErrAccessDenied,
// and not engine.ErrUnavailable, for refusals by access control: 1044,
// 1045, 1142, 1143, 1227, 1370, 1698, 1862, and 3118 (MySQL) or 4151
// (MariaDB) for a locked account. Other server errors, such as a missing
// table, wrap neither, and nothing does once the caller's context has
// ended.
//
// # Tables
//
// The lock table (DefaultTable unless WithTable says otherwise) has one row
// per key that was ever locked:
//
//   - lock_key VARBINARY(512): the primary key, compared byte by byte, so
//     "A" and "a", or "x" and "x ", are different locks. Keys are at most
//     MaxKeyLen (512) bytes; longer keys are ErrInvalidKey before any I/O.
//   - owner, mode: the exclusive holder's owner value (unique per lease),
//     and whether the last grant was exclusive (0) or shared (1).
//   - version BIGINT UNSIGNED: bumped by every grant, reader or writer, and
//     never reset. Rows are cleared on release, not deleted, so the version
//     survives and tokens strictly increase per key. The cleared rows stay
//     by design; they hold no lock.
//   - expires_at DATETIME(6): NOW(6) plus the TTL, computed by the server in
//     the granting or renewing statement. The client's clock is never read
//     for expiry; every expiry test is "expires_at <= NOW(6)" on the server.
//   - ttl_us: the lease period, so that one renewal statement renews every
//     lease by its own TTL.
//   - value VARBINARY(256): the exclusive holder's Request.Value.
//
// "<table>_readers" holds one row per shared lease, keyed by (key, owner),
// with its own version, expires_at and value. "<table>_queue" holds the
// lease strategy's waiters' tickets (below). "<table>_fences" holds the
// row strategy's token counter of each key. "<table>_released" holds the
// tombstones of ForceRelease (below). Migrate adds the value columns
// to tables made by an earlier version (MySQL has no ADD COLUMN IF NOT
// EXISTS, so it asks information_schema first); run it once after
// upgrading, before the new version takes locks: until then its grants
// fail with the server's unknown-column error. Engines of the earlier
// version keep working on the migrated tables, but write no values: while
// both run, Holders may show an earlier writer's value for a writer of
// the old version (and no value for its readers).
//
// # Lease strategy (StrategyLease, the default)
//
// An exclusive grant is one conditional UPDATE: it succeeds only if the row
// has no owner or has expired and no unexpired reader row exists, and it
// sets owner, expires_at and version = version+1 (returned through
// LAST_INSERT_ID, so no second round trip). The first grant of a key is an
// INSERT IGNORE with version 1. Lease.Token is that version.
//
// A shared grant is one short transaction: the same conditional bump of the
// key row's version (writers and readers share one sequence), the removal
// of expired reader rows of that key, and a reader row. Readers do not
// prefer writers: a writer waits until no unexpired reader is left, so a
// continuous stream of overlapping readers can hold it off.
//
// A counted shared grant (Request.Limit, a semaphore permit) is the same
// transaction, with the reader row added by INSERT ... SELECT ... FROM the
// readers table WHERE the key's rows have expires_at > NOW(6) HAVING
// COUNT(*) < Limit: no extra statement. The bump holds the key row's
// exclusive lock until the commit, so the counted grants of a key run one
// at a time, and the count reads every committed row (under shared locks in
// REPEATABLE READ, from a fresh read view in READ COMMITTED), never an
// older snapshot: two grants can never both find the last permit free,
// whatever the processes. Every grant bumps the version under that lock,
// so each permit has a token of its own, above every earlier grant's on
// the key. A permit is a reader row with the lease
// rules above: a crashed holder's permit counts until its expires_at, at
// most its TTL after its last grant or renewal, on the server's clock.
// Counted waiters queue like every lease waiter (below), in arrival order
// across processes: a permit that comes free goes to the first ticket,
// and a cancelled wait deletes its ticket.
// Limits().Counted is true for the lease strategy.
//
// Request.Value is written by the granting statement into the key row (a
// writer) or the reader row, so it costs no round trip either.
//
// Release is an UPDATE (or, for a reader, a DELETE) conditional on the
// lease's owner value, its version and expires_at > NOW(6). If it changes
// nothing the lease had lost the key: Release returns engine.ErrNotHeld.
//
// With Request.Renew one goroutine per engine renews every held lease in
// rounds (a third of the shortest TTL held apart), the leases whose
// validity runs out first first, with UPDATEs of up to 2,000 leases each,
// four at a time (engine/internal/sqlcore). A lease the renewal no longer finds ends
// with engine.ErrLeaseLost; so does one whose last successful renewal is a
// TTL old, less engine.Margin, while the server cannot be reached (a renewal
// statement may not outlast that). Without Renew the row expires on the
// server at expires_at; the client ends the lease with ErrLeaseLost from a
// timer of the TTL less engine.Margin (a tenth, 5ms to 2s) started before
// the grant statement was sent, so it fires ahead of the server's expiry
// even when the client's timers run late (it measures elapsed time only,
// never the wall clock). A grant whose answer arrives after that is refused
// and cleared.
//
// Waiting queues, in arrival order across processes: a waiter refused
// once inserts a ticket into "<table>_queue" (an AUTO_INCREMENT number,
// an expiry on NOW(6)), and every grant statement is refused while an
// unexpired ticket of the key ahead of the attempt's own blocks it (any
// ticket for an exclusive or counted request, only writers' for a plain
// shared one, so readers at the head go together). A holder that releases
// and asks again at once so goes to the back. The winner deletes its
// ticket: a shared grant in its transaction, an exclusive one in a second
// statement after its one-statement UPDATE (if that fails, the grant is
// undone and Acquire fails). A waiter that crashed stops refreshing its
// ticket, which expires 2s (or four times the longest backoff) after its
// last refresh and is skipped from then on. Only the head of the queue
// polls with grant attempts: eight at 2.5ms (half the first delay of
// WithBackoff), then doubling to 200ms (its longest), so a key held long
// is not polled hard; the other waiters read their place with one
// SELECT that locks nothing, the second as often as the head, those
// further back less. Within one engine only the first waiter on a key
// polls at all; its refreshes renew every ticket of the engine on the key,
// and a release by the same engine wakes it at once. So a process with
// hundreds of waiters on one hot key sends one poller's statements, not
// hundreds (without this, the seckill demo's 1000 buyers on two keys did
// not finish in five minutes). 8 engines on one hot key get 33 or 34
// grants each (the conformance suite's fairness check, min/max 0.97; 0.13
// without the queue). Fairness costs throughput: the key is idle between
// a release and the head's next attempt, where a releasing holder used to
// take it straight back; see docs/benchmarks.md. Tickets need
// the queue table: run Migrate after upgrading. A waiter creates nothing
// beyond the key's permanent row and its ticket, and returns at once when
// ctx ends or the engine closes. Every statement runs under its own op timeout rather than
// ctx, so a cancellation never leaves a grant half-known.
//
// # Row strategy (StrategyRow)
//
// A grant is SELECT ... FOR UPDATE (exclusive) or SELECT ... LOCK IN SHARE
// MODE (shared) on the key's row, in a transaction on a connection pinned
// out of the pool, held until Release ends it. Waiters queue inside InnoDB
// and are woken when the holder's transaction ends, without polling; InnoDB
// picks the order, and a waiting writer holds back readers that come after
// it. A
// TryLock uses FOR UPDATE NOWAIT; MySQL has no NOWAIT for LOCK IN SHARE
// MODE, so a shared TryLock waits for up to the least
// innodb_lock_wait_timeout, one second.
//
// A waiting Acquire sets the session's innodb_lock_wait_timeout from ctx's
// deadline (whole seconds, rounded up to 2, 5, 10, 30, 60 or 300, or an
// hour with no deadline); when ctx ends first, or the engine closes, the
// engine sends KILL QUERY for the pinned connection on a side
// connection, so the server drops the queued request at once (the driver
// alone would close the socket and leave the request queued until its lock
// wait timeout). A lock wait timeout surfaces as engine.ErrNotAcquired. The
// server user needs the right to kill its own connections, which every
// user has. The statements around the lock (session settings, START
// TRANSACTION, and after the grant the token draw and the holder record)
// are bounded by ctx as well as the op timeout: a grant answered just
// before ctx's deadline that cannot be finished in time is given up (the
// connection is dropped, which rolls back and frees the row), so Acquire
// returns within kit.UndoWait of ctx's end.
//
// The fencing token is the key's counter in "<table>_fences", raised by
// one autocommit INSERT ... ON DUPLICATE KEY UPDATE on another connection
// once the row lock is granted: the row lock orders the draws of a key and
// the commit makes each durable, so the next holder gets a larger token
// after a killed holder and after a server crash alike (the checker in
// integration/ restarts the server with SIGKILL). That costs one log flush
// per grant. Release ends the holder's transaction with ROLLBACK, which
// needs no flush. Tokens are strictly increasing for each key. The row
// strategy and the lease strategy keep separate token sequences and must
// not share a table.
//
// The row lock lives as long as its connection. The session's wait_timeout
// is set to the lease period (whole seconds, rounded up, at least one)
// plus one second of margin for network latency, and each lease pings its
// connection every WithConnCheck interval (250ms by default) and at least
// three times a period, which keeps a running holder's session alive. A
// holder that stops talking (a crash, a SIGSTOP, a long GC pause, a frozen
// VM, a cut network) has its session ended by the server that long after
// its last ping, which rolls back its transaction and frees the key:
// another process is granted within the period plus about one second
// (Limits().Floor is 2s; measured: 1.0s to 2.0s with a 1s watchdog; before
// this, a paused holder's TCP connection kept the lock until the server's
// default wait_timeout, 8 hours). A resumed holder's next ping fails, and
// its lease ends with engine.ErrLeaseLost at once; the next holder's token
// is larger, so its late fenced writes are refused. Request.Renew needs no
// statements; without it the lease ends with a rollback from a local TTL
// timer.
//
// Each held row lease uses one pool connection; the pool of a *gorm.DB
// passed to New must allow that many plus one for the side statements.
//
// For Holders a row holder records itself inside its own transaction once
// it has its token: an exclusive holder writes its token and value into
// the key's row (which it has locked), a shared one inserts a row into
// "<table>_readers". That is one more statement per grant, on the pinned
// connection and never committed (no log flush): the release's ROLLBACK,
// or the end of a dead holder's session, takes the record away together
// with the lock, so the record exists exactly as long as the lock does.
// Holders reads the records in a READ UNCOMMITTED transaction. Row-strategy
// engines of an earlier version write no records, so their holders are not
// listed.
//
// The row strategy does not count (Limits().Counted is false, so a
// Request.Limit is refused): InnoDB has no counted lock, only shared and
// exclusive ones. Counting would need the holders' records to be counted
// under a per-key mutex that outlives no grant, from uncommitted rows, and
// waiters for a permit could not queue in InnoDB (a permit is any of Limit
// slots, and a lock wait is on one row), so they would poll: what the row
// strategy exists to avoid. Use the lease strategy for semaphores.
//
// # Session strategy (StrategySession)
//
// A lease is a named lock of the server, GET_LOCK, held by a session
// until Release runs RELEASE_LOCK (which the session's end does too).
// Exclusive only: GET_LOCK has no shared mode, so Limits().ExclusiveOnly
// is true and a shared or counted request is refused by Validate before
// any I/O. A key maps to the lock name "cerberus:" and 48 hex digits of
// SHA-256 over the table name and the key (57 characters, within MySQL's
// 64, whatever the key holds); two keys whose names collide exclude each
// other, which costs false contention only.
//
// The first attempt is one statement, an INSERT ... SELECT ... WHERE
// GET_LOCK(name, 0) = 1 into the MEMORY table "<table>_names": it takes
// the lock, sets the name's token to max(counter + 1, the server's UTC
// clock in 8µs ticks since 2025-01-01) and records the holder (connection
// id, key, value, and the connection's wait_timeout if it is shared), or
// affects no row if the key is held. It runs on one of the engine's
// shared connections (WithSessionConns, 2 by default), whose session holds
// the names of any number of leases, one statement at a time per
// connection: an engine holds tens of thousands of leases on those few
// connections (TestScale holds 20,000 on two), and a lease costs memory,
// not a connection. A try goes to the shared connection that holds the
// fewest leases and, among those, to the one the last statement ran on
// (so that one lock after another costs one server session, not a wake-up
// of an idle one each), or to another if that one is busy. GET_LOCK is
// reentrant per session, so a name is never tried on a connection that
// holds it already. A shared connection's try and release are prepared
// on the server when it is dialled, and executed from then on, which the
// server does without parsing them again (other statements are sent as
// text, with the driver's interpolateParams, and so are these on a server
// that refuses to prepare them: one whose max_prepared_stmt_count is
// reached). A waiting request that finds the key held then waits on a
// connection pinned for it (up to WithMaxConns less the shared ones and
// two): it CALLs "<table>_grant2", which waits in GET_LOCK (locking no
// table) and runs the same write once
// granted, one round trip, and keeps that connection for as long as it
// holds the lease. A waiting request whose key a try found held in the
// last second goes to the CALL at once. The MEMORY table has no redo log,
// so no grant waits for a disk flush; a restart or crash empties it, and
// the clock floor keeps the next tokens above every token before, as long
// as the server's clock does not step back across the loss and no name is
// granted more than once per 8µs on average. Migrate sizes it for 128 MiB
// (about 155,000 names), whatever the server's max_heap_table_size; when
// it is full, the rows of names nobody holds whose counters the clock has
// passed are swept. Cancelling a wait sends KILL QUERY for the waiter's
// connection from another one and drops the waiter's connection, which
// also frees a grant that raced the cancel; a try on a shared connection
// is left to finish (cutting it would end every lease on it) and its
// grant, if it came, is released in the background. A statement on a
// shared connection is bounded by WithOpTimeout all the same: an engine
// from Open keeps its shared connections in a pool of their own whose
// socket reads and writes time out within one and a half of it (a
// deadline set again only when less than half of one is left, not for
// each read and write), and one from New bounds each
// statement by a context; a statement that runs out cuts the connection,
// which ends every lease on it.
//
// A silent holder is cut off as with the row strategy: its session's
// wait_timeout is the lease period in whole seconds plus one (on a shared
// connection, the shortest period of the leases it carries; the server's
// own setting comes back once it carries none), and the engine pings
// every connection that holds a lease every WithConnCheck interval and
// three times a period, so Limits().Floor is 2s. A lease counts as held
// until its connection's last successful statement's send time (for a
// fixed TTL, its grant's) plus the period less engine.Margin, so a holder
// whose pings stop answering is told before the server frees its lock; a
// failed ping ends it at once, and on a shared connection every lease it
// carries. Holders and List read the names table's rows whose connection
// holds their name (IS_USED_LOCK).
//
// ForceRelease (engine.Releaser) of a lease on a pinned connection
// records the holder's token as the name's released one and kills the
// holder's connection with KILL CONNECTION, which frees the name at once;
// the holder's next ping fails, it reads the record, and its lease ends
// with engine.ErrReleasedByOperator. A lease on a shared connection is
// revoked instead: the record is written, and the holder's next ping
// (every WithConnCheck, a third of its period at most) reads it, tells
// the lease engine.ErrReleasedByOperator and releases the name, leaving
// the connection's other leases alone; ForceRelease returns once the
// name is free. A holder that has not let go within its connection's
// wait_timeout (a process stopped meanwhile, which the server has not cut
// off yet) has its connection killed, which ends every lease on it; a
// stopped holder reads the record when it resumes, and its revoked lease
// ends with engine.ErrReleasedByOperator, the others with
// engine.ErrLeaseLost.
//
// # Tokens without records
//
// WithHolderRecords(false) (config holder_records: false) trades the names
// table's rows (each name's counter and holder) for the price of a bare
// GET_LOCK. A grant, the try on a shared connection and the wait on a
// pinned one alike, is one SELECT that takes the lock with GET_LOCK and,
// once it is held, reads the server's clock (SYSDATE(6), in the UTC time
// zone that the engine sets on each of its connections): that reading, in
// the same 8µs ticks (counted in this process from its microseconds), is
// the token, and the statement writes nothing. A release is a bare
// RELEASE_LOCK, sent once the server's clock has left the token's tick as
// this process reckons it: the server read its clock before it sent the
// grant's answer, so that is a microsecond after what was left of the
// reading's tick has passed since the answer came back (kit.FreeAt: at
// most 9µs; a lease held longer waits for nothing). A connection the
// engine drops, which frees its names, is dropped no sooner than
// kit.ClockGuard (10µs: a tick, the microsecond the reading may be
// truncated by, and one more) after the answer that carried the last token
// came back, so those names too are freed in a later tick of the server's
// clock. So whatever frees
// the name, the next grant of the key, which reads the clock only once it
// holds the name, reads a later tick, and tokens strictly increase as long
// as the server's clock runs at the rate of the client's and does not
// step back (by more than the time between two grants of one key). There
// is no counter to lose: a restart, a crash or a promoted replica change
// nothing, as
// long as the new server's clock is not behind the old one's by more than
// the time since its last grant. The assumption is stronger than with
// records, where the clock matters only after the MEMORY table is lost: a
// clock stepped back while the server runs gives lower tokens for as long
// as the step. A server started with --sysdate-is-now makes SYSDATE the
// statement's start, before a wait for the lock: do not use it without
// records. Holders, List and ForceRelease return an error wrapping
// errors.ErrUnsupported: nothing on the server names a lock name's key,
// value or token. Every process that locks a key must use the same
// setting.
//
// # Holders and Watch
//
// Holders (engine.Inspector) is one statement. With the lease strategy it
// is a SELECT of the key row, if it has an owner and expires_at > NOW(6),
// UNION ALL the key's reader rows with expires_at > NOW(6), ordered by
// version, which is the token: an expired lease is not listed even before
// a grant tidies its row, and the server's clock alone decides. With the
// row strategy it reads the uncommitted holder records (above).
//
// The engine does not implement engine.Watcher: MySQL and MariaDB cannot
// notify a client of a change to a row (no pub/sub, no blocking query),
// and a polling loop inside the engine would be no better than the root
// package's own, which re-reads Holders every 200ms for an engine without
// Watch.
//
// # Force release
//
// ForceRelease (engine.Releaser) frees a key whoever holds it, and writes
// a tombstone per freed lease in "<table>_released" (owner value, key,
// token, expiry), which Migrate creates; on tables without it (Migrate not
// run after upgrading) ForceRelease fails with an *engine.OpError and
// changes nothing.
//
// With the lease strategy it is one transaction of at most six
// statements: locking reads of the key row (which every grant of the key
// updates, so no grant runs in between) and of its unexpired reader rows,
// the deletion of expired tombstones, then per freed lease its tombstone,
// lasting its TTL from now on NOW(6), and the clearing of its row (the
// version stays, so the next grant's token is above). Waiters of other
// processes are granted at their next poll (the head of the queue polls
// at most WithBackoff's max apart), the engine's own at once. A holder in
// another process is told at its next renewal (a third of its TTL): the
// renewal finds its row gone, reads the tombstones of the leases it lost
// (one more SELECT, only then) and ends those named with
// engine.ErrReleasedByOperator. A holder stopped (SIGSTOP) through the
// release is told at its first renewal after it resumes, unless its TTL
// ran out meanwhile: then its own clock ends it first, with
// engine.ErrLeaseLost. Its Release and renewals are conditional on its
// owner value and find nothing: engine.ErrNotHeld, and the next holder's
// row is left alone.
//
// With the row strategy each holder's uncommitted record names its
// connection's CONNECTION_ID() and its lease period. ForceRelease reads
// the records (READ UNCOMMITTED, as Holders does), commits a tombstone for
// each, reads the records again, and sends KILL <id> for the connection
// of each holder still there: the server
// rolls its transaction back, freeing the row lock, and InnoDB grants the
// next waiter in its lock queue at once; its token comes from the fences
// counter, above. The holder's connection check (every WithConnCheck,
// 250ms by default) fails, reads its tombstone and ends the lease with
// engine.ErrReleasedByOperator; a holder stopped through it finds out at
// its first check after it resumes. KILL of another user's connection
// needs CONNECTION_ADMIN (or SUPER); of the engine's own user, nothing
// more. A holder that released in the moment between the second read and
// the KILL may have had its connection reused by a new lease of the same
// engine, which the KILL then ends with engine.ErrLeaseLost: a rare,
// visible loss, never an overlap.
//
// # Fenced writes
//
// fence.Update (package engine/mysql/fence) updates rows with gorm only
// where their fence column is below the lease's token, and sets the fence
// to the token, in one statement.
package mysql

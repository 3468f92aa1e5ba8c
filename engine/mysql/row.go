package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// maxIdleRowConns is how many pinned connections the row strategy keeps for
// reuse after their leases end.
const maxIdleRowConns = 16

// noDeadlineWait is the session innodb_lock_wait_timeout, in seconds, of a
// waiting row Acquire whose ctx has no deadline. When it runs out the wait
// is simply asked again; cancellation does not depend on it.
const noDeadlineWait = 3600

// maxRowTries bounds the statements one row Acquire may repeat: after a
// lock wait timeout with no ctx deadline, a deadlock, or a key row that did
// not exist yet.
const maxRowTries = 1000

// rowConn is a connection pinned out of the pool for the row strategy.
type rowConn struct {
	conn     *sql.Conn
	bounded  bool      // its connector bounds socket reads and writes (Engine.muxDB)
	id       uint64    // CONNECTION_ID(), for KILL QUERY
	lockWait int       // the session's innodb_lock_wait_timeout, 0 if unknown
	idleMax  int       // the session's wait_timeout, 0 if the server's default
	used     time.Time // when it was last given back
}

// idleTimeout is the session wait_timeout, in whole seconds, that makes the
// server end a row lease's session when its holder stops talking for one
// lease period: rounded up, and one second more, so that the server never
// cuts a live holder short while network latency holds back its answers
// and pings (a holder pings three times a period, but the grant's answer,
// the token draw and the first ping each cross the network first).
func idleTimeout(period time.Duration) int {
	return max(1, int(math.Ceil(period.Seconds()))) + 1
}

// stale reports whether the server may already have ended rc's session for
// idling past its wait_timeout while rc sat unused.
func (rc *rowConn) stale() bool {
	return rc.idleMax > 0 &&
		time.Since(rc.used) > time.Duration(rc.idleMax)*time.Second-200*time.Millisecond
}

// getConn takes an idle pinned connection or pins a new one.
func (e *Engine) getConn(ctx context.Context) (*rowConn, error) {
	e.mu.Lock()
	for n := len(e.idle); n > 0; n = len(e.idle) {
		rc := e.idle[n-1]
		e.idle = e.idle[:n-1]
		if !rc.stale() {
			e.mu.Unlock()
			return rc, nil
		}
		e.mu.Unlock()
		e.discard(rc)
		e.mu.Lock()
	}
	e.mu.Unlock()
	return e.pinConn(ctx, e.db)
}

// pinConn pins a new connection of db, once a pin token is free (the
// engine's WithMaxConns budget).
func (e *Engine) pinConn(ctx context.Context, db *sql.DB) (*rowConn, error) {
	select {
	case e.pins <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.frame.Closing():
		return nil, engine.ErrClosed
	}
	c, err := db.Conn(ctx)
	if err != nil {
		<-e.pins
		return nil, err
	}
	rc := &rowConn{conn: c, bounded: db == e.muxDB}
	err = c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&rc.id)
	if err == nil && e.noRecords() {
		// The tokens' clock (clockNow) reads SYSDATE in the session's
		// time zone.
		_, err = c.ExecContext(ctx, "SET time_zone = '+00:00'")
	}
	if err != nil {
		_ = c.Close()
		<-e.pins
		return nil, err
	}
	return rc, nil
}

// putConn keeps rc for reuse, or discards it if enough are kept or the
// engine is closed. rc must be outside any transaction.
func (e *Engine) putConn(rc *rowConn) {
	rc.used = time.Now()
	e.mu.Lock()
	if !e.frame.ClosedLocked() && len(e.idle) < maxIdleRowConns {
		e.idle = append(e.idle, rc)
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	e.discard(rc)
}

// discard closes rc's connection instead of giving it back to the pool: its
// session settings were changed, or it may be broken or carry a pending
// KILL QUERY, and the pool may be the caller's. A session engine without
// holder records first waits clockGuard: a lock name freed by the end of
// the session, like one freed by a release (see queries.clockSession), is
// then freed after the tick of its token.
func (e *Engine) discard(rc *rowConn) {
	if e.noRecords() {
		kit.WaitPast(time.Now(), clockGuard)
	}
	_ = rc.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = rc.conn.Close()
	<-e.pins
}

// exec runs a statement on rc that does not wait for locks, bounded by
// ctx and the op timeout. A statement that ctx cuts short breaks rc's
// connection (the driver closes it), so the caller discards rc, which
// rolls back whatever it held.
func (e *Engine) exec(ctx context.Context, rc *rowConn, q string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	_, err := rc.conn.ExecContext(ctx, q, args...)
	return err
}

// lockWaitFor returns the innodb_lock_wait_timeout, in whole seconds, for a
// wait until ctx's deadline: rounded up, so that the deadline (and the
// KILL QUERY it triggers) comes first.
func lockWaitFor(ctx context.Context, wait bool) int {
	if !wait {
		return 1
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return noDeadlineWait
	}
	// Rounded up to a few steps, so that most waits reuse the session's
	// setting instead of sending a SET each time.
	s := int(math.Ceil(time.Until(dl).Seconds())) + 1
	for _, step := range []int{2, 5, 10, 30, 60, 300} {
		if s <= step {
			return step
		}
	}
	return noDeadlineWait
}

// killable runs fn on rc with a context the caller cannot cancel, so that
// the driver never drops the connection mid-statement. If ctx ends or the
// engine closes first, killable returns with killed set, after waiting up
// to kit.UndoWait for the clean-up, and rc is no longer the caller's:
// KILL QUERY for rc's connection id goes out on a side connection from the
// pool, which makes the server abandon the statement (a lock wait
// included), and once fn has returned rc is discarded, which rolls back
// whatever it held. A statement that never returns (its connection is cut
// off without a reset) keeps that goroutine until the connection dies; it
// keeps the caller no longer than kit.UndoWait.
func (e *Engine) killable(ctx context.Context, rc *rowConn,
	fn func(context.Context) error) (error, bool) {
	res := make(chan error, 1)
	go func() { res <- fn(context.Background()) }()
	select {
	case err := <-res:
		return err, false
	case <-ctx.Done():
	case <-e.frame.Closing():
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		kctx, cancel := e.core.OpCtx()
		_, _ = e.db.ExecContext(kctx, fmt.Sprintf("KILL QUERY %d", rc.id))
		cancel()
		<-res
		e.discard(rc)
	}()
	kit.WaitUpTo(done, kit.UndoWait)
	return nil, true
}

// sessionFor sets rc's innodb_lock_wait_timeout for this wait and its
// wait_timeout for the lease period, each only when it differs from what
// the session has (one statement sets both).
func (e *Engine) sessionFor(ctx context.Context, rc *rowConn, req engine.Request) error {
	lw, idle := lockWaitFor(ctx, req.Wait), idleTimeout(req.TTL)
	var set []string
	if lw != rc.lockWait {
		set = append(set, fmt.Sprintf("innodb_lock_wait_timeout = %d", lw))
	}
	if idle != rc.idleMax {
		set = append(set, fmt.Sprintf("wait_timeout = %d", idle))
	}
	if len(set) == 0 {
		return nil
	}
	if err := e.exec(ctx, rc, "SET SESSION "+strings.Join(set, ", ")); err != nil {
		return err
	}
	rc.lockWait, rc.idleMax = lw, idle
	return nil
}

// sessionOutlived reports whether a grant answered on rc may belong to a
// session the server has ended: the statement, sent at asked, took at
// least the session's wait_timeout, so its answer may have waited unread
// that long (a stopped process), and the server ends a session that idle.
// Then a ping decides, on the same connection, within ctx and the op
// timeout (a ping that ctx cuts short counts as a lost session).
func (e *Engine) sessionOutlived(ctx context.Context, rc *rowConn, asked time.Time) bool {
	if rc.idleMax == 0 || time.Since(asked) < time.Duration(rc.idleMax)*time.Second {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	return rc.conn.PingContext(ctx) != nil
}

// acquireErr is the error of an Acquire whose statement failed with err:
// ErrNotAcquired with ctx's error if ctx has ended (the statement was cut
// short for it), else err classified.
func (e *Engine) acquireErr(ctx context.Context, req engine.Request, err error) error {
	if ctx.Err() != nil {
		return errors.Join(engine.ErrNotAcquired, ctx.Err())
	}
	return e.opErr(ctx, "acquire", req.Key, err)
}

// stopErr is the error of an Acquire stopped by its ctx or by Close.
func (e *Engine) stopErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return errors.Join(engine.ErrNotAcquired, err)
	}
	return engine.ErrClosed
}

// acquireRow takes the key's row lock in a transaction on a pinned
// connection. Waiters queue in InnoDB's lock queue for the row.
func (e *Engine) acquireRow(ctx context.Context, req engine.Request) (engine.Lease, error) {
	rc, err := e.getConn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
		}
		return nil, e.opErr(ctx, "acquire", req.Key, err)
	}
	q := e.q.rowLock
	switch {
	case req.Mode == engine.Shared:
		// MySQL has no LOCK IN SHARE MODE NOWAIT, so a shared TryLock
		// waits up to the least lock wait timeout, one second.
		q = e.q.rowShare
	case !req.Wait:
		q = e.q.rowTryLock
	}
	for try := 0; try < maxRowTries; try++ {
		l, next, err := e.tryRow(ctx, rc, req, q)
		if next == nil {
			return l, err
		}
		rc = next
	}
	e.discard(rc)
	return nil, e.opErr(ctx, "acquire", req.Key,
		fmt.Errorf("%w after %d attempts", errGaveUp, maxRowTries))
}

// tryRow is one transaction on rc that locks the key's row with the query
// q. next is the connection the next try should use (rc, or a new one when
// rc's session may be gone); when next is nil, it returns the lease or the
// error that ends the Acquire, and has put rc back or dropped it.
func (e *Engine) tryRow(ctx context.Context, rc *rowConn, req engine.Request,
	q string) (l engine.Lease, next *rowConn, err error) {
	if err := ctx.Err(); err != nil {
		e.putConn(rc)
		return nil, nil, errors.Join(engine.ErrNotAcquired, err)
	}
	if err := e.sessionFor(ctx, rc, req); err != nil {
		e.discard(rc)
		return nil, nil, e.acquireErr(ctx, req, err)
	}
	if err := e.exec(ctx, rc, "START TRANSACTION"); err != nil {
		e.discard(rc)
		return nil, nil, e.acquireErr(ctx, req, err)
	}
	var version uint64
	asked := time.Now()
	err, killed := e.killable(ctx, rc, func(qctx context.Context) error {
		return rc.conn.QueryRowContext(qctx, q, req.Key).Scan(&version)
	})
	if killed {
		// The KILL may come after the grant; either way the caller asked
		// to stop. killable drops the connection, which rolls back and
		// leaves no queued request behind.
		return nil, nil, e.stopErr(ctx)
	}
	if err == nil && !e.sessionOutlived(ctx, rc, asked) {
		l, err := e.grantedRow(ctx, req, rc)
		return l, nil, err
	}
	if err == nil {
		return e.renewConn(ctx, rc, req)
	}
	if rerr := e.exec(ctx, rc, "ROLLBACK"); rerr != nil {
		e.discard(rc)
		return nil, nil, e.acquireErr(ctx, req, rerr)
	}
	if err := e.rowRefused(ctx, rc, req, err); err != nil {
		return nil, nil, err
	}
	return nil, rc, nil
}

// renewConn drops rc after a grant to a session the server may have ended
// since (the answer waited unread longer than the session's wait_timeout:
// this process was stopped, and the row may be someone else's by now), and
// returns a new connection to start again on.
func (e *Engine) renewConn(ctx context.Context, rc *rowConn, req engine.Request) (engine.Lease, *rowConn, error) {
	e.discard(rc)
	next, err := e.getConn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
		}
		return nil, nil, e.opErr(ctx, "acquire", req.Key, err)
	}
	return nil, next, nil
}

// rowRefused handles err, why the row lock failed after the rollback: a
// missing row is created, a timeout ends a TryLock, a deadlock is tried
// again. A non-nil result ends the Acquire, with rc put back or dropped.
func (e *Engine) rowRefused(ctx context.Context, rc *rowConn, req engine.Request, err error) error {
	switch n := errNumber(err); {
	case errors.Is(err, sql.ErrNoRows):
		// First use of the key: create its row, outside the transaction,
		// and lock it on the next turn.
		err, killed := e.killable(ctx, rc, func(qctx context.Context) error {
			_, err := rc.conn.ExecContext(qctx, e.q.rowEnsure, req.Key)
			return err
		})
		if killed {
			return e.stopErr(ctx)
		}
		if err != nil {
			e.discard(rc)
			return e.opErr(ctx, "acquire", req.Key, err)
		}
	case n == errLockWaitTimeout || n == errLockNowait:
		if !req.Wait {
			e.putConn(rc)
			return fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key)
		}
	case n == errDeadlock:
	default:
		e.discard(rc)
		return e.opErr(ctx, "acquire", req.Key, err)
	}
	return nil
}

// grantedRow finishes a row grant: it draws the fencing token and starts
// the lease's connection check and, without Renew, its expiry timer.
//
// The token is the key's counter in "<table>_fences", raised by one
// autocommit statement on another connection of the pool once the row lock
// is granted. The row lock orders the draws of one key, and the commit
// makes each durable, so the next holder gets a larger token even after a
// killed holder or a server crash. It costs one log flush per grant.
//
// Both statements are bounded by ctx as well as the op timeout, so that a
// grant that came just before ctx's deadline does not keep the caller past
// it: if ctx ends first, rc is discarded, which rolls back and frees the
// row (a token drawn meanwhile is skipped).
func (e *Engine) grantedRow(ctx context.Context, req engine.Request, rc *rowConn) (engine.Lease, error) {
	fail := func(err error) (engine.Lease, error) {
		e.discard(rc)
		return nil, e.acquireErr(ctx, req, err)
	}
	token, err := e.drawToken(ctx, req.Key)
	if err != nil {
		return fail(err)
	}
	owner := rowOwner(e.core.Owner(), rc.id)
	if err := e.markRow(ctx, rc, req, token, owner); err != nil {
		return fail(err)
	}
	l := &rowLease{LeaseCore: kit.NewLeaseCore(req.Key, req.Mode, req.OnLost), e: e, rc: rc, period: req.TTL, owner: owner,
		stop: make(chan struct{})}
	l.SetToken(token)
	if err := e.frame.Track(l, func() error {
		if !req.Renew {
			// The row strategy has no server-side expiry: a fixed TTL
			// ends with a rollback from this local timer.
			l.mu.Lock()
			l.timer = time.AfterFunc(req.TTL, func() { l.end(engine.ErrLeaseLost) })
			l.mu.Unlock()
		}
		return nil
	}); err != nil {
		e.discard(rc)
		return nil, err
	}
	// Within Acquire, so before Close can wait for the background: on a
	// goroutine of its own, which Close waits for.
	e.frame.Run(l.watch)
	return l, nil
}

// markRow records the holder in its own transaction on rc, for Holders:
// an exclusive holder writes its token and value into the key's row, which
// it has locked; a shared one adds a row to "<table>_readers". Nothing is
// committed: the release's ROLLBACK (or the end of the session) takes the
// record away with the lock, and Holders reads it uncommitted.
func (e *Engine) markRow(ctx context.Context, rc *rowConn, req engine.Request, token uint64,
	owner string) error {
	ttl := req.TTL.Microseconds()
	if req.Mode == engine.Shared {
		return e.exec(ctx, rc, e.q.rowMarkShared, req.Key, owner, token, ttl, req.Value)
	}
	return e.exec(ctx, rc, e.q.rowMark, owner, token, req.Value, ttl, req.Key)
}

// drawToken raises key's counter in "<table>_fences" on a connection of its
// own and returns the new value. The connection is held until the result
// is read: database/sql reads a Result under its connection's lock, and a
// connection given back to the pool at once could be pinned meanwhile by a
// waiter blocked on the very row lock this holder has, which would
// deadlock the two until the lock wait timeout.
func (e *Engine) drawToken(ctx context.Context, key string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	c, err := e.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	res, err := c.ExecContext(ctx, e.q.rowToken, key)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if n == 1 {
		return 1, nil // a first draw inserts the counter's row
	}
	id, err := res.LastInsertId()
	return uint64(id), err
}

// rowLease is a row-strategy lease: an open transaction holding the key
// row's lock on a pinned connection.
type rowLease struct {
	kit.LeaseCore
	e      *Engine
	period time.Duration // the lease period: its session's wait_timeout
	owner  string        // its record's owner value (rowOwner)
	stop   chan struct{}

	mu    sync.Mutex
	rc    *rowConn // nil once the lease has ended
	timer *time.Timer
}

// watch pings the pinned connection every conn-check interval, and at
// least three times a lease period, which keeps the session inside its
// wait_timeout while the holder runs; a failed ping means the server has
// rolled the transaction back (connection killed or timed out, server
// restarted, network gone), and the lease ends with engine.ErrLeaseLost,
// or engine.ErrReleasedByOperator if ForceRelease killed it.
// A holder that was paused past its period finds that out with its first
// tick after it resumes.
func (l *rowLease) watch() {
	t := time.NewTicker(min(l.e.cfg.connCheck, max(l.period/3, 50*time.Millisecond)))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		rc := l.rc
		var err error
		if rc != nil {
			ctx, cancel := l.e.core.OpCtx()
			err = rc.conn.PingContext(ctx)
			cancel()
		}
		l.mu.Unlock()
		if rc == nil {
			return
		}
		if err != nil {
			l.end(l.lostErr(err))
			return
		}
	}
}

// lostErr is why the lease ended when its connection failed with err:
// engine.ErrReleasedByOperator if an operator freed it (its tombstone is
// there: ForceRelease killed the connection), else engine.ErrLeaseLost.
func (l *rowLease) lostErr(err error) error {
	if l.e.tombstoned(l.owner) {
		return fmt.Errorf("%w (connection killed: %v)", engine.ErrReleasedByOperator, err)
	}
	return fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err)
}

// take detaches the connection from the lease, stopping its timer and
// watcher; nil if the lease has ended.
func (l *rowLease) take() *rowConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	rc := l.rc
	if rc == nil {
		return nil
	}
	l.rc = nil
	if l.timer != nil {
		l.timer.Stop()
	}
	close(l.stop)
	return rc
}

// Release ends the lease's transaction, which frees the row lock, and
// returns the connection to the engine. The transaction is rolled back: its
// only write is the token draw, which must not persist, and a rollback
// needs no log flush. A lease whose transaction is gone
// (expired by its timer, connection lost, already released) returns
// engine.ErrNotHeld.
func (l *rowLease) Release(ctx context.Context) error {
	rc := l.take()
	if rc == nil {
		return fmt.Errorf("%w: %q (lease ended: %w)", engine.ErrNotHeld, l.Key(), l.Signal.Err())
	}
	err := l.e.exec(context.Background(), rc, "ROLLBACK")
	l.forget()
	if err != nil {
		l.e.discard(rc)
		l.Signal.Close(l.lostErr(err))
		return l.Signal.NotHeld(l.Key())
	}
	l.e.putConn(rc)
	l.Signal.Close(engine.ErrReleased)
	return nil
}

// end closes the lease with err, then rolls the transaction back. In that
// order: once the row lock is free the next holder may be granted, and the
// old holder must have been told by then (a GET_LOCK strategy's checker
// run saw the other order grant a waiter while the old holder was still
// being told).
func (l *rowLease) end(err error) {
	rc := l.take()
	l.Signal.Close(err)
	if rc != nil {
		if l.e.exec(context.Background(), rc, "ROLLBACK") == nil {
			l.e.putConn(rc)
		} else {
			l.e.discard(rc)
		}
	}
	l.forget()
}

func (l *rowLease) forget() {
	l.e.frame.Forget(l)
}

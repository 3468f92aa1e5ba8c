package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// errTableFull is the server's error when a MEMORY table has reached
// max_heap_table_size.
const errTableFull = 1114

// lockName returns the GET_LOCK name of key on table: "cerberus:" and 48
// hex digits of SHA-256 over the table name, a NUL byte and the key, 57
// characters in all, within MySQL's 64-character limit whatever the key
// holds. Two keys whose names collide exclude each other (a false
// contention) and share a token counter, which still increases for each.
// Lock names are global to the server, so engines on two tables never
// contend, except by such a collision.
func lockName(table, key string) string {
	h := sha256.Sum256([]byte(table + "\x00" + key))
	return "cerberus:" + hex.EncodeToString(h[:24])
}

// getLockWait returns GET_LOCK's timeout, in seconds, for a request: 0 for
// a TryLock; for a wait, the time to ctx's deadline rounded up, and one
// second more, so that the deadline (and the KILL QUERY it triggers) comes
// first; noDeadlineWait without a deadline, after which the wait is asked
// again.
func getLockWait(ctx context.Context, wait bool) float64 {
	if !wait {
		return 0
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return noDeadlineWait
	}
	return min(noDeadlineWait, math.Ceil(time.Until(dl).Seconds())+1)
}

// setIdle sets rc's wait_timeout for a lease period of ttl (idleTimeout)
// unless the session has it already: the server ends the session, which
// frees its lock, when its holder stops talking for that long.
func (e *Engine) setIdle(ctx context.Context, rc *rowConn, ttl time.Duration) error {
	idle := idleTimeout(ttl)
	if idle == rc.idleMax {
		return nil
	}
	if err := e.exec(ctx, rc, fmt.Sprintf("SET SESSION wait_timeout = %d", idle)); err != nil {
		return err
	}
	rc.idleMax = idle
	return nil
}

// acquireSession grants req with GET_LOCK. The first attempt is one
// statement, on a shared connection (sqlcore.Mux.Grant), that tries the lock
// (GET_LOCK(name, 0)), draws the token and records the holder
// (sessionGrant); a waiting request that finds the key held then waits
// inside the server, in GET_LOCK, on a connection pinned for it, with one
// CALL that draws the token too (sessionWaitProc). A waiting request whose
// key a try found held within hotFor goes to the CALL at once.
func (e *Engine) acquireSession(ctx context.Context, req engine.Request) (engine.Lease, error) {
	name := lockName(e.cfg.table, req.Key)
	first := true
	for try := 0; !(req.Wait && e.hot.recent(name)); try++ {
		l, err := e.mux.Grant(ctx, req, name)
		switch {
		case l != nil:
			return l, nil
		case errors.Is(err, sqlcore.ErrRefused) && !req.Wait:
			return nil, fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key)
		case errors.Is(err, sqlcore.ErrRefused):
			e.hot.mark(name)
			first = false // it would be refused again: wait at once
		case errNumber(err) == errTableFull:
			e.sweep() // then try on a pinned connection, which tries again
		case err != nil && ctx.Err() != nil:
			return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
		case errors.Is(err, engine.ErrClosed):
			return nil, err
		case err != nil && errNumber(err) == 0 && try == 0:
			// The connection died under the grant, or the pool handed
			// out one the server had closed (after a restart): its
			// close freed whatever it took. Once more, on a new one.
			continue
		case err != nil:
			return nil, e.opErr(ctx, "acquire", req.Key, err)
		}
		// Refused, or every shared connection holds the name already.
		break
	}
	rc, err := e.getConn(ctx)
	if err != nil {
		return nil, e.pinErr(ctx, req, err)
	}
	for try := 0; try < maxRowTries; try++ {
		l, next, err := e.trySession(ctx, rc, req, name, first && try == 0)
		if next == nil {
			return l, err
		}
		rc = next
	}
	e.discard(rc)
	return nil, e.opErr(ctx, "acquire", req.Key, fmt.Errorf("%w after %d attempts", errGaveUp, maxRowTries))
}

// hotFor is how long a waiting Acquire goes straight to the waiting CALL
// after a try of its engine found the key held: on a hot key the try
// would fail again, and it takes the names table's lock for nothing.
const hotFor = time.Second

// maxHot bounds the names hotNames keeps.
const maxHot = 4096

// hotNames records when a try last found a lock name held.
type hotNames struct {
	mu sync.Mutex
	at map[string]time.Time
}

// mark records that a try found name held now.
func (h *hotNames) mark(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at == nil || len(h.at) >= maxHot {
		h.at = make(map[string]time.Time)
	}
	h.at[name] = time.Now()
}

// recent reports whether a try found name held within hotFor, and forgets
// an older record.
func (h *hotNames) recent(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.at[name]
	if ok && time.Since(at) >= hotFor {
		delete(h.at, name)
		return false
	}
	return ok
}

// pinErr is the error of an Acquire that could not pin a connection.
func (e *Engine) pinErr(ctx context.Context, req engine.Request, err error) error {
	switch {
	case ctx.Err() != nil:
		return errors.Join(engine.ErrNotAcquired, ctx.Err())
	case errors.Is(err, engine.ErrClosed):
		return err
	}
	return e.opErr(ctx, "acquire", req.Key, err)
}

// trySession is one attempt on rc: the one-statement try first (when
// first, unless a waiting request's key was found held within hotFor),
// then, for a waiting request, the waiting CALL. When next is nil
// it returns the lease or the error that ends the Acquire, and has put rc
// back or dropped it; otherwise next is the connection to try again on:
// rc when the wait ran out without a deadline or the names table was full
// (swept since), a new one when rc's session was cut after the grant.
func (e *Engine) trySession(ctx context.Context, rc *rowConn, req engine.Request, name string,
	first bool) (l engine.Lease, next *rowConn, err error) {
	if err := ctx.Err(); err != nil {
		e.putConn(rc)
		return nil, nil, errors.Join(engine.ErrNotAcquired, err)
	}
	if err := e.setIdle(ctx, rc, req.TTL); err != nil {
		e.discard(rc)
		return nil, nil, e.acquireErr(ctx, req, err)
	}
	var (
		a      grantAnswer
		killed bool
	)
	sent := time.Now()
	try := first && !(req.Wait && e.hot.recent(name))
	if try {
		a, err = e.tryGrant(ctx, rc, req, name)
		if err == nil && a.g == 0 && req.Wait {
			e.hot.mark(name)
		}
	}
	if !try || err == nil && a.g == 0 && req.Wait {
		sent = time.Now()
		a, err, killed = e.waitGrant(ctx, rc, req, name)
	}
	g := a.g
	switch {
	case killed:
		// killable drops rc, which frees the lock should the grant
		// have come first.
		return nil, nil, e.stopErr(ctx)
	case errNumber(err) == errTableFull:
		// GET_LOCK may have granted the name before the write failed:
		// free it on rc, which did not hold it before, so that the next
		// try does not find it held by a connection whose close the
		// server has not seen yet. Then sweep, and try again.
		if e.exec(ctx, rc, "DO RELEASE_LOCK(?)", name) != nil {
			return e.renewConn(ctx, rc, req)
		}
		e.sweep()
		return nil, rc, nil
	case err != nil:
		e.discard(rc) // which frees the lock if the grant came first
		return nil, nil, e.acquireErr(ctx, req, err)
	case g != 0 && g != 1:
		e.discard(rc)
		return nil, nil, e.opErr(ctx, "acquire", req.Key, errors.New("GET_LOCK failed"))
	case g == 0 && !req.Wait:
		e.putConn(rc)
		return nil, nil, fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key)
	case g == 0:
		return nil, rc, nil // the wait ran out (no deadline): ask again
	}
	return e.grantedSession(ctx, rc, req, name, a, sent)
}

// grantAnswer is what a grant statement answered: g is GET_LOCK's answer
// (1 granted, 0 the key held or the wait ran out, -1 failed), token the
// lease's token if g is 1, and, without holder records, free when its
// release may free the lock (kit.FreeAt; zero with records).
type grantAnswer struct {
	g     int64
	token uint64
	free  time.Time
}

// tryGrant runs the one-statement try on rc, bounded by ctx and the op
// timeout: g is 1 and token the new token if it granted the lock, g is 0 if
// the key is held. A statement that ctx cuts short breaks rc's connection.
func (e *Engine) tryGrant(ctx context.Context, rc *rowConn, req engine.Request, name string) (grantAnswer,
	error) {
	qctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	if !e.cfg.records {
		var ans sql.NullString
		if err := rc.conn.QueryRowContext(qctx, e.q.sessClockGrant, name, 0).Scan(&ans); err != nil {
			return grantAnswer{}, err
		}
		return clockAnswer(ans)
	}
	res, err := rc.conn.ExecContext(qctx, e.q.sessTry, name, req.Key, req.Value, 0, name)
	if err != nil {
		return grantAnswer{}, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return grantAnswer{}, err
	}
	id, err := res.LastInsertId()
	return grantAnswer{g: 1, token: uint64(id)}, err
}

// waitGrant runs the waiting grant on rc (see killable for killed): the
// CALL with holder records, else the clock grant with a wait. Its g is -1
// for NULL.
func (e *Engine) waitGrant(ctx context.Context, rc *rowConn, req engine.Request, name string) (grantAnswer,
	error, bool) {
	// The scan targets belong to the statement's goroutine: once killed,
	// killable may return while that goroutine still writes them.
	type answer struct {
		got sql.NullInt64
		a   grantAnswer
	}
	a := new(answer)
	err, killed := e.killable(ctx, rc, func(qctx context.Context) error {
		if !e.cfg.records {
			var ans sql.NullString
			err := rc.conn.QueryRowContext(qctx, e.q.sessClockGrant, name, getLockWait(ctx, req.Wait)).Scan(&ans)
			if err != nil {
				return err
			}
			a.a, err = clockAnswer(ans)
			a.got = sql.NullInt64{Int64: a.a.g, Valid: a.a.g >= 0}
			return err
		}
		return rc.conn.QueryRowContext(qctx, e.q.sessWait, name, getLockWait(ctx, req.Wait), req.Key,
			req.Value).Scan(&a.got, &a.a.token)
	})
	if killed || !a.got.Valid {
		return grantAnswer{g: -1}, err, killed
	}
	a.a.g = a.got.Int64
	return a.a, err, false
}

// clockAnswer reads the answer of a grant without holder records (see
// queries.clockSession), received just now: if it granted, g is 1, token
// the server's clock reading in ticks (kit.Ticks) and free when the lock
// may be freed (kit.FreeAt, from now); g is 0 if it did not (the key is
// held, the wait ran out, or GET_LOCK failed), and -1 with an error if the
// reading is not a UTC time with its microseconds (the name is held then:
// the caller drops the connection, which frees it). NULL, which the grant
// never answers, is -1 too.
func clockAnswer(ans sql.NullString) (grantAnswer, error) {
	switch {
	case !ans.Valid:
		return grantAnswer{g: -1}, nil
	case ans.String == "0":
		return grantAnswer{}, nil
	}
	t, err := parseClock(ans.String)
	if err != nil {
		return grantAnswer{g: -1}, fmt.Errorf("the grant's clock reading: %w", err)
	}
	return grantAnswer{g: 1, token: kit.Ticks(t), free: kit.FreeAt(time.Now(), t)}, nil
}

// sweep clears, best effort, the rows of lock names that nobody holds and
// whose counters the clock has overtaken, when the MEMORY table is full,
// and rebuilds the table with room for namesHeap bytes if it has less: a
// server restart sizes every MEMORY table by the server's
// max_heap_table_size again, whatever Migrate made it.
func (e *Engine) sweep() {
	ctx, cancel := e.core.OpCtx()
	defer cancel()
	_, _ = e.db.ExecContext(ctx, e.q.sessSweep)
	_ = e.growNames(ctx)
}

// errCut is the cause of a grant whose session the server cut before this
// process read the answer.
var errCut = errors.New("the session ended after the grant")

// anchor returns the time the validity of a lease granted on rc by a
// statement sent at sent runs from: sent itself, unless the answer took
// half the lease's life or more (a long wait, or this process was
// stopped); then a ping confirms that the session is alive, which re-arms
// the server's idle clock, and the ping's send time is the anchor. A ping
// that fails means the server cut the session (its lock is gone): anchor
// returns an error wrapping errCut.
func (e *Engine) anchor(ctx context.Context, rc *rowConn, ttl time.Duration, sent time.Time) (time.Time, error) {
	if time.Since(sent) < sqlcore.Life(ttl)/2 {
		return sent, nil
	}
	pctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	sent = time.Now()
	if err := rc.conn.PingContext(pctx); err != nil {
		if ctx.Err() != nil {
			return sent, errors.Join(engine.ErrNotAcquired, ctx.Err())
		}
		return sent, fmt.Errorf("%w: %w", errCut, err)
	}
	return sent, nil
}

// grantedSession makes the lease of grant a on rc, whose session holds
// name, by a statement sent at sent; see trySession for next. The lease
// is valid until its anchor plus sqlcore.Life(TTL), renewed by its watchdog's
// pings when req.Renew. On an error rc is dropped, which frees the lock
// (the drawn token is skipped).
func (e *Engine) grantedSession(ctx context.Context, rc *rowConn, req engine.Request, name string,
	a grantAnswer, sent time.Time) (engine.Lease, *rowConn, error) {
	sent, err := e.anchor(ctx, rc, req.TTL, sent)
	switch {
	case errors.Is(err, errCut):
		return e.renewConn(ctx, rc, req)
	case err != nil:
		e.discard(rc)
		return nil, nil, err
	case time.Since(sent) >= sqlcore.Life(req.TTL):
		e.discard(rc)
		return nil, nil, fmt.Errorf("%w: %q: the grant arrived after its %v TTL had run out",
			engine.ErrNotAcquired, req.Key, req.TTL)
	}
	l := &sessionLease{e: e, key: req.Key, name: name, token: a.token, free: a.free, conn: rc.id, ttl: req.TTL,
		renew: req.Renew, sig: kit.NewSignal(req.OnLost), stop: make(chan struct{}), rc: rc, validFrom: sent}
	if err := e.frame.Track(l, func() error {
		l.mu.Lock()
		l.timer = time.AfterFunc(sqlcore.Life(req.TTL)-time.Since(sent), l.expire)
		l.mu.Unlock()
		return nil
	}); err != nil {
		l.mu.Lock()
		l.rc = nil
		l.mu.Unlock()
		e.discard(rc)
		return nil, nil, err
	}
	// Within Acquire, so before Close can wait for the background: on a
	// goroutine of its own, which Close waits for.
	e.frame.Run(l.watch)
	return l, nil, nil
}

// sessionLease is a session-strategy lease: a GET_LOCK name held by the
// session of a pinned connection.
type sessionLease struct {
	e     *Engine
	key   string
	name  string // the lock name
	token uint64
	free  time.Time // when the lock may be freed (grantAnswer.free)
	conn  uint64    // the pinned connection's CONNECTION_ID()
	ttl   time.Duration
	renew bool
	sig   *kit.Signal
	stop  chan struct{} // closed when the lease ends: stops watch

	mu    sync.Mutex
	rc    *rowConn    // nil once the lease has ended
	timer *time.Timer // ends the lease when its validity runs out
	// validFrom is the send time of the grant, or of the ping that
	// confirmed a late grant, then of each watchdog ping of a renewed
	// lease: the server's idle clock for the session started after it.
	validFrom time.Time
}

func (l *sessionLease) Key() string           { return l.key }
func (l *sessionLease) Mode() engine.Mode     { return engine.Exclusive }
func (l *sessionLease) Token() uint64         { return l.token }
func (l *sessionLease) Done() <-chan struct{} { return l.sig.Done() }
func (l *sessionLease) Err() error            { return l.sig.Err() }

// watch pings the pinned connection every conn-check interval, and at
// least three times a lease period, which keeps the session inside its
// wait_timeout. A renewed lease moves its validity to each ping's send
// time; a fixed one keeps its expiry. A ping that fails, or does not
// answer before the validity runs out, ends the lease with
// engine.ErrLeaseLost (engine.ErrReleasedByOperator if an operator killed
// the connection): the connection was killed, the server restarted, the
// network is gone, or the server cut the session while this process was
// stopped.
func (l *sessionLease) watch() {
	t := time.NewTicker(min(l.e.cfg.connCheck, max(l.ttl/3, time.Millisecond)))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if err := l.ping(); err != nil {
			l.end(l.lostErr(err))
			return
		}
	}
}

// ping sends one ping on the pinned connection, bounded by the lease's
// validity; it returns nil as well when the lease has ended.
func (l *sessionLease) ping() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rc == nil {
		return nil
	}
	deadline := l.validFrom.Add(sqlcore.Life(l.ttl))
	if time.Until(deadline) <= 0 {
		return errors.New("the lease period ran out before a ping")
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	sent := time.Now()
	if err := l.rc.conn.PingContext(ctx); err != nil {
		return err
	}
	if l.renew {
		l.validFrom = sent
		l.timer.Reset(sqlcore.Life(l.ttl) - time.Since(sent))
	}
	return nil
}

// lostErr is the error of a lease whose connection failed with cause:
// engine.ErrReleasedByOperator if a force release recorded its token as
// its name's released one, else engine.ErrLeaseLost.
func (l *sessionLease) lostErr(cause error) error {
	ctx, cancel := l.e.core.OpCtx()
	defer cancel()
	var released uint64
	err := l.e.db.QueryRowContext(ctx, l.e.q.sessMarked, l.name).Scan(&released)
	if err == nil && released == l.token {
		return fmt.Errorf("%w: %q", engine.ErrReleasedByOperator, l.key)
	}
	return fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, cause)
}

// expire ends the lease when its validity has run out.
func (l *sessionLease) expire() { l.end(engine.ErrLeaseLost) }

// take detaches the connection from the lease, stopping its timer and
// watchdog; nil if the lease has ended. It waits for a ping in flight.
func (l *sessionLease) take() *rowConn {
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

// unlock runs RELEASE_LOCK on rc and reports whether the session held the
// name, bounded by the op timeout.
func (l *sessionLease) unlock(rc *rowConn) (bool, error) {
	ctx, cancel := l.e.core.OpCtx()
	defer cancel()
	return releaseName(ctx, connRelease{rc.conn, l.e.q.sessRelease}, l.name, l.free)
}

// releaser runs a release: the session's connection, with sessRelease's
// text, or sessRelease prepared on it.
type releaser interface {
	QueryRowContext(ctx context.Context, args ...any) *sql.Row
}

// connRelease is a release's text on a connection, as a releaser.
type connRelease struct {
	conn  *sql.Conn
	query string
}

// QueryRowContext runs the release with args on the connection.
func (c connRelease) QueryRowContext(ctx context.Context, args ...any) *sql.Row {
	return c.conn.QueryRowContext(ctx, c.query, args...)
}

// releaseName runs RELEASE_LOCK of name with r once free has passed (at
// once with holder records, where it is zero), and reports whether the
// session held the name. Without records the wait is at most a tick and a
// microsecond after the grant's answer (kit.FreeAt), and none for a lease
// held longer than that: it keeps the name until the server's clock has
// left the tick of the lease's token, so that the next grant reads a later
// tick.
func releaseName(ctx context.Context, r releaser, name string, free time.Time) (bool, error) {
	kit.WaitPast(free, 0)
	var got sql.NullInt64
	err := r.QueryRowContext(ctx, name).Scan(&got)
	return got.Valid && got.Int64 == 1, err
}

// Release runs RELEASE_LOCK on the pinned connection, which goes back to
// the engine. A lease that has ended (expired, lost, released) returns an
// error wrapping engine.ErrNotHeld; so does one whose connection fails now
// or no longer holds the lock: the connection is closed. The statement
// runs even if ctx is cancelled, bounded by the engine's op timeout.
func (l *sessionLease) Release(ctx context.Context) error {
	rc := l.take()
	if rc == nil {
		return fmt.Errorf("%w: %q (lease ended: %w)", engine.ErrNotHeld, l.key, l.sig.Err())
	}
	held, err := l.unlock(rc)
	l.e.frame.Forget(l)
	if err != nil || !held {
		if err == nil {
			err = errors.New("the session no longer held the lock")
		}
		l.sig.Close(l.lostErr(err))
		l.e.discard(rc)
		return l.sig.NotHeld(l.key)
	}
	l.e.putConn(rc)
	l.sig.Close(engine.ErrReleased)
	return nil
}

// end closes the lease with err, then releases the lock (or drops the
// connection, which frees it). Told first: once the lock is free the next
// waiter is granted at once, and the holder must have been told by then.
func (l *sessionLease) end(err error) {
	rc := l.take()
	l.sig.Close(err)
	if rc != nil {
		if held, uerr := l.unlock(rc); uerr == nil && held {
			l.e.putConn(rc)
		} else {
			l.e.discard(rc)
		}
	}
	l.e.frame.Forget(l)
}

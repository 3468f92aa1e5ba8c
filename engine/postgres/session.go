package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// idleTimeout is the idle_session_timeout, in milliseconds, of a pinned
// session whose lease period is ttl: rounded up to whole milliseconds, so
// that the server never cuts a session before its period.
func idleTimeout(ttl time.Duration) string {
	return strconv.FormatInt((ttl + time.Millisecond - 1).Milliseconds(), 10)
}

// lockParts returns how pg_locks shows the advisory lock of h, taken with
// the one-bigint form of pg_advisory_lock: its classid (the high 32 bits)
// and objid (the low 32 bits), with objsubid 1.
func lockParts(h int64) (classid, objid int64) {
	return int64(uint32(uint64(h) >> 32)), int64(uint32(h))
}

// pin takes a connection out of the pool for one session lease: a pins
// token first (so that one connection is always left for Holders, Ping and
// Migrate), then the connection, within ctx and the op timeout.
func (e *Engine) pin(ctx context.Context) (*pgxpool.Conn, error) {
	select {
	case e.pins <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.frame.Closing():
		return nil, engine.ErrClosed
	}
	actx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	c, err := e.pool.Acquire(actx)
	if err != nil {
		<-e.pins
		return nil, err
	}
	return c, nil
}

// unpin gives a pinned connection back: to the pool when reuse is true
// (its session holds no advisory lock and has its settings reset), closed
// otherwise, which ends its server session and every advisory lock the
// session may still hold.
func (e *Engine) unpin(c *pgxpool.Conn, reuse bool) {
	if reuse {
		c.Release()
	} else {
		e.closeConn(c)
	}
	<-e.pins
}

// acquireSession grants req: at once on a shared session connection if
// the server grants the try (sqlcore.Mux.Grant), else, for a waiting request, on a
// connection pinned for it (acquirePinned). Either way one statement takes
// the key's advisory lock, draws the token and records the holder (see
// sessionGrant).
func (e *Engine) acquireSession(ctx context.Context, req engine.Request) (engine.Lease, error) {
	h := e.cfg.hash(req.Key)
	if req.Wait && e.contended(h) {
		return e.queueFor(ctx, req, h)
	}
	for try := 0; ; try++ {
		// First the shared backends, at once: an uncontended grant
		// costs no connection of its own.
		l, err := e.mux.Grant(ctx, req, h)
		switch {
		case l != nil:
			return l, nil
		case errors.Is(err, sqlcore.ErrRefused) && !req.Wait:
			return nil, fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key)
		case err == nil, errors.Is(err, sqlcore.ErrRefused):
			// Contended (or every backend holds the key): wait in the
			// server's queue on a pinned connection.
			return e.queueFor(ctx, req, h)
		case errors.Is(err, engine.ErrClosed):
			return nil, err
		case ctx.Err() != nil:
			return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
		case transient(err) && req.Wait && try < 100, down(err) && try == 0:
			// A serialization failure, or a backend that died under
			// the grant (its close freed whatever it took): again, on
			// a new connection if need be.
			continue
		}
		return nil, e.opErr(ctx, "acquire", req.Key, err)
	}
}

// hotFor is how long a key refused to a waiting Acquire counts as
// contended: the engine's next waiting Acquires of it queue in the server
// at once, without a try on a shared backend first, so that they arrive in
// the server's queue as early as they would without the shared backends
// (one client in eight lost 20% of its turns on a hot key to the extra
// round trip).
const hotFor = time.Second

// queueFor grants req, whose key h is contended, on a pinned connection
// (acquirePinned). h counts as contended from now, and for a waiting
// request again from its grant, so that a wait longer than hotFor (a
// loaded server) does not send the engine's next waiting Acquire of h to
// a shared backend first: a round trip in which it is in no queue, while
// waiters that came after it queue ahead of it.
func (e *Engine) queueFor(ctx context.Context, req engine.Request, h int64) (engine.Lease, error) {
	e.markContended(h) // still hot while waited for
	l, err := e.acquirePinned(ctx, req, h)
	if l != nil && req.Wait {
		e.markContended(h)
	}
	return l, err
}

// contended reports whether a waiting Acquire of h was refused, or
// granted after a wait in the server's queue, within hotFor.
func (e *Engine) contended(h int64) bool {
	e.hotMu.Lock()
	defer e.hotMu.Unlock()
	t, ok := e.hot[h]
	return ok && time.Since(t) < hotFor
}

// markContended records that a waiting Acquire of h was refused now, and
// forgets the keys refused longer than hotFor ago once there are many.
func (e *Engine) markContended(h int64) {
	e.hotMu.Lock()
	defer e.hotMu.Unlock()
	now := time.Now()
	if len(e.hot) >= 1024 {
		for k, t := range e.hot {
			if now.Sub(t) >= hotFor {
				delete(e.hot, k)
			}
		}
	}
	e.hot[h] = now
}

// acquirePinned grants req on a connection pinned for this lease alone:
// a waiting request queues inside the server, holding the connection while
// it waits and while it holds the lock (see lockOn).
func (e *Engine) acquirePinned(ctx context.Context, req engine.Request, h int64) (engine.Lease, error) {
	for try := 0; ; try++ {
		c, err := e.pin(ctx)
		if err != nil {
			return nil, e.stopOr(ctx, "acquire", req.Key, err)
		}
		r, sent, stopped := e.lockOn(ctx, c, req, h)
		switch {
		case stopped:
			return nil, e.stopErr(ctx) // lockOn dropped c
		case r.err != nil:
			// The statement may have failed after the lock was taken:
			// closing the connection frees it.
			e.unpin(c, false)
			if transient(r.err) && req.Wait && try < 100 {
				continue
			}
			return nil, e.opErr(ctx, "acquire", req.Key, r.err)
		case !r.ok:
			e.unpin(c, true) // refused: the session is as it was
			return nil, fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key)
		}
		l, err := e.grantSession(ctx, c, req, h, r, sent)
		if errors.Is(err, errCut) && req.Wait && ctx.Err() == nil && try < 100 {
			// The session was cut for idling past the lease period
			// after the grant: this process was stopped meanwhile.
			// Nothing is held; start again.
			continue
		}
		return l, err
	}
}

// errCut is grantSession's error when the session did not survive a late
// answer to its grant.
var errCut = errors.New("the session ended after the grant")

// stopOr is the error of an Acquire whose pin failed with err.
func (e *Engine) stopOr(ctx context.Context, op, key string, err error) error {
	if ctx.Err() != nil {
		return errors.Join(engine.ErrNotAcquired, ctx.Err())
	}
	if errors.Is(err, engine.ErrClosed) {
		return err
	}
	return e.opErr(ctx, op, key, err)
}

// stopErr is the error of an Acquire stopped by its ctx or by Close.
func (e *Engine) stopErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return errors.Join(engine.ErrNotAcquired, err)
	}
	return engine.ErrClosed
}

// grantResult is the answer to a grant statement.
type grantResult struct {
	ok    bool
	token uint64
	idle  string // the session's idle_session_timeout before the grant
	err   error
}

// grantQuery is the grant statement for req.
func (e *Engine) grantQuery(req engine.Request) string {
	switch {
	case req.Wait && req.Mode == engine.Shared:
		return e.q.grantWaitShared
	case req.Wait:
		return e.q.grantWait
	case req.Mode == engine.Shared:
		return e.q.grantTryShared
	}
	return e.q.grantTry
}

// lockOn runs the grant statement on c (pg_advisory_lock or _shared for a
// waiting request, pg_try_advisory_lock or _shared for a TryLock, then
// the token and the holder record: see sessionGrant) and returns its answer
// and its send time. The statement runs under a context of its own, so
// that pgx never drops the connection mid-statement on the caller's
// cancellation. If ctx ends or the engine closes first, lockOn returns
// stopped, after waiting up to kit.UndoWait for the clean-up, and c is
// no longer the caller's: a cancel request makes the server abandon the
// wait, and once the statement has returned c is closed, which frees the
// lock should the grant have come first. A server that answers neither the
// statement nor the cancel request within the op timeout gets its socket
// closed.
func (e *Engine) lockOn(ctx context.Context, c *pgxpool.Conn, req engine.Request,
	h int64) (r grantResult, sent time.Time, stopped bool) {
	res := make(chan grantResult, 1)
	qctx, qcancel := context.WithCancel(context.Background())
	q := e.grantQuery(req)
	sent = time.Now()
	go func() {
		var r grantResult
		var (
			token *int64
			clock *time.Time // without records: the server's clock (queries.clockSession)
			dst   any        = &token
		)
		if !e.cfg.records {
			dst = &clock
		}
		r.err = c.QueryRow(qctx, q, e.grantArgs(h, idleTimeout(req.TTL), req, true)...).Scan(&r.ok, dst,
			&r.idle)
		if clock != nil {
			n := int64(kit.Ticks(*clock))
			token = &n
		}
		if r.err == nil && r.ok {
			if token == nil {
				r.err = errors.New("the grant drew no token")
			} else {
				r.token = uint64(*token)
			}
		}
		res <- r
	}()
	select {
	case r := <-res:
		qcancel()
		return r, sent, false
	case <-ctx.Done():
	case <-e.frame.Closing():
	}
	e.frame.RunUpTo(kit.UndoWait, func() {
		defer qcancel()
		cctx, cancel := e.core.OpCtx()
		_ = c.Conn().PgConn().CancelRequest(cctx)
		cancel()
		t := time.NewTimer(e.cfg.opTimeout)
		defer t.Stop()
		select {
		case <-res:
		case <-t.C:
			qcancel() // pgx closes the socket
			<-res
		}
		e.unpin(c, false)
	})
	return grantResult{}, sent, true
}

// anchor returns the time the validity of a lease granted on c by a
// statement sent at sent runs from. That is sent itself, unless the answer
// took half the lease's life or more (a long wait for the lock, or this
// process was stopped): then a ping confirms that the session is alive,
// which re-arms the server's idle clock, and the ping's send time is the
// anchor. A ping that fails means the server cut the session (its lock
// is gone): anchor returns an error wrapping errCut. It never closes c.
func (e *Engine) anchor(ctx context.Context, c *pgxpool.Conn, ttl time.Duration,
	sent time.Time) (time.Time, error) {
	if time.Since(sent) < sqlcore.Life(ttl)/2 {
		return sent, nil
	}
	pctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	sent = time.Now()
	if err := c.Ping(pctx); err != nil {
		if ctx.Err() != nil {
			return sent, errors.Join(engine.ErrNotAcquired, ctx.Err())
		}
		return sent, fmt.Errorf("%w: %w", errCut, err)
	}
	return sent, nil
}

// grantSession makes the lease of a grant r on c, whose session holds the
// advisory lock h and whose statement was sent at sent. The lease is valid
// until its anchor (see anchor) plus the lease period, less
// engine.Margin: the server's idle clock for the session starts only once
// the statement has completed. The ping anchor may send is bounded by ctx
// as well as the op timeout, so that a grant that came just before ctx's
// deadline does not keep the caller past it. On an error, c is closed,
// which frees the lock (the drawn token is skipped, and a holder record whose
// session holds no lock does not count).
func (e *Engine) grantSession(ctx context.Context, c *pgxpool.Conn, req engine.Request,
	h int64, r grantResult, sent time.Time) (engine.Lease, error) {
	sent, err := e.anchor(ctx, c, req.TTL, sent)
	switch {
	case errors.Is(err, errCut):
		e.unpin(c, false)
		return nil, e.opErr(context.Background(), "acquire", req.Key, err)
	case err != nil:
		e.unpin(c, false)
		return nil, err
	case time.Since(sent) >= sqlcore.Life(req.TTL):
		// The answer came after the lease's period had run out (this
		// process was stopped, or the network held it): the server may
		// have cut the session since. Closing it frees the lock.
		e.unpin(c, false)
		return nil, fmt.Errorf("%w: %q: the grant arrived after its %v TTL had run out",
			engine.ErrNotAcquired, req.Key, req.TTL)
	}
	l := &sessionLease{LeaseCore: kit.NewLeaseCore(req.Key, req.Mode, req.OnLost), e: e, hash: h, idle: r.idle,
		ttl: req.TTL, renew: req.Renew, stop: make(chan struct{}), conn: c, validFrom: sent}
	l.SetToken(r.token)
	if err := e.frame.Track(l, func() error {
		l.mu.Lock()
		l.timer = time.AfterFunc(sqlcore.Life(req.TTL)-time.Since(sent), l.expire)
		l.mu.Unlock()
		return nil
	}); err != nil {
		l.mu.Lock()
		l.conn = nil
		l.mu.Unlock()
		e.unpin(c, false)
		return nil, err
	}
	if req.Renew {
		// Within Acquire, so before Close can wait for the background: on
		// a goroutine of its own, which Close waits for.
		e.frame.Run(l.watch)
	}
	return l, nil
}

// sessionLease is a session-strategy lease: an advisory lock held by the
// server session of a pinned connection.
type sessionLease struct {
	kit.LeaseCore
	e     *Engine
	hash  int64
	idle  string // the session's idle_session_timeout to put back
	ttl   time.Duration
	renew bool
	stop  chan struct{} // closed when the lease ends: stops watch

	mu    sync.Mutex
	conn  *pgxpool.Conn // nil once the lease has ended
	timer *time.Timer   // ends the lease when its validity runs out
	// validFrom is the send time of the last statement that succeeded on
	// the pinned connection (the grant, or the ping that confirmed a late
	// one, then each watchdog ping): the server's idle clock for the
	// session started after it, so the session lives at least until
	// validFrom plus the lease period.
	validFrom time.Time
}

// watch is the watchdog of a renewed lease: every third of the lease
// period it pings the pinned connection (a read of the session's
// revocations, see ForceRelease), which resets the server's idle clock
// for the session, and moves the lease's validity to the ping's send
// time. A revocation of the lease ends it with
// engine.ErrReleasedByOperator, then releases it. A ping that fails, or does not answer before the validity runs
// out, ends the lease with engine.ErrLeaseLost: the connection was killed,
// the server restarted, the network is gone, or the server cut the session
// while this process was stopped.
func (l *sessionLease) watch() {
	t := time.NewTicker(max(l.ttl/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		c, from := l.conn, l.validFrom
		if c == nil {
			l.mu.Unlock()
			return
		}
		deadline := from.Add(sqlcore.Life(l.ttl))
		if time.Until(deadline) <= 0 {
			l.mu.Unlock()
			l.end(fmt.Errorf("%w: the lease period ran out before a ping", engine.ErrLeaseLost))
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		sent := time.Now()
		revoked := false
		err := l.e.readRevoked(ctx, c, func(key string, token uint64) {
			revoked = revoked || key == l.Key() && token == l.Token()
		})
		cancel()
		if err == nil {
			l.validFrom = sent
			l.timer.Reset(sqlcore.Life(l.ttl) - time.Since(sent))
		}
		l.mu.Unlock()
		switch {
		case err != nil:
			l.end(fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err))
			return
		case revoked:
			l.end(engine.ErrReleasedByOperator) // told, then unlocked
			return
		}
	}
}

// expire ends the lease when its validity has run out.
func (l *sessionLease) expire() { l.end(engine.ErrLeaseLost) }

// take detaches the connection from the lease, stopping its timer and
// watchdog; nil if the lease has ended. It waits for a ping in flight.
func (l *sessionLease) take() *pgxpool.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.conn
	if c == nil {
		return nil
	}
	l.conn = nil
	if l.timer != nil {
		l.timer.Stop()
	}
	close(l.stop)
	return c
}

// unlock releases the advisory lock and puts back the session's
// idle_session_timeout (and clears a shared lease's holder row), in one
// statement. It reports whether the session held the lock.
func (l *sessionLease) unlock(c *pgxpool.Conn) (held bool, err error) {
	q, args := l.e.releaseOf(l.Mode(), l.hash, l.idle, l.Key(), l.Token())
	ctx, cancel := l.e.core.OpCtx()
	defer cancel()
	err = c.QueryRow(ctx, q, args...).Scan(&held, nil)
	return held, err
}

// releaseOf returns the release statement of a session lease of key in
// mode, on advisory lock h, with token token, that puts idle back as the
// session's idle_session_timeout, and its arguments (see queries.session
// and, without holder records, queries.clockSession: there the release
// waits on the server for its clock to pass the token's tick).
func (e *Engine) releaseOf(mode engine.Mode, h int64, idle, key string, token uint64) (string, []any) {
	switch {
	case !e.cfg.records && mode == engine.Shared:
		return e.q.releaseShared, []any{h, idle, kit.TickEnd(token)}
	case !e.cfg.records:
		return e.q.releaseExclusive, []any{h, idle, kit.TickEnd(token)}
	case mode == engine.Shared:
		return e.q.releaseShared, []any{h, idle, key}
	}
	return e.q.releaseExclusive, []any{h, idle}
}

// grantArgs returns the arguments of a grant statement of req on advisory
// lock h that sets the session's idle_session_timeout to idle (when
// setIdle): with holder records also the key, mode and value it records
// (see sessionGrant); without, only those the statement reads (see
// queries.clockSession).
func (e *Engine) grantArgs(h int64, idle string, req engine.Request, setIdle bool) []any {
	switch {
	case e.cfg.records:
		return []any{h, idle, req.Key, int(req.Mode), req.Value}
	case setIdle:
		return []any{h, idle}
	}
	return []any{h}
}

// Release releases the advisory lock (and clears a shared lease's holder
// row) on the pinned connection, which goes back to the pool. A lease that has ended
// (expired, lost, released) returns an error wrapping engine.ErrNotHeld;
// so does one whose connection fails now: the connection is closed, which
// ends its session and the lock with it. The statement runs even if ctx is
// cancelled, bounded by the engine's op timeout.
func (l *sessionLease) Release(ctx context.Context) error {
	c := l.take()
	if c == nil {
		return fmt.Errorf("%w: %q (lease ended: %w)", engine.ErrNotHeld, l.Key(), l.Signal.Err())
	}
	held, err := l.unlock(c)
	l.e.frame.Forget(l)
	switch {
	case err != nil:
		l.e.unpin(c, false)
		l.Signal.Close(fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err))
		return l.Signal.NotHeld(l.Key())
	case !held:
		l.e.unpin(c, false)
		return l.Signal.NotHeld(l.Key())
	}
	l.e.unpin(c, true)
	l.Signal.Close(engine.ErrReleased)
	return nil
}

// end closes the lease with err, then releases the lock (or closes the
// connection, which frees it).
func (l *sessionLease) end(err error) {
	c := l.take()
	// Told first: once the lock is free the next waiter is granted at
	// once, and the holder must have been told by then (the checker saw a
	// grant 0.5-2 ms before an expired holder's Done closed).
	l.Signal.Close(err)
	if c != nil {
		held, uerr := l.unlock(c)
		l.e.unpin(c, uerr == nil && held)
	}
	l.e.frame.Forget(l)
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// errRefused is muxGrant's error when the server refused the try-lock:
// another session holds the key in a conflicting mode, or waits for it
// ahead of this request.
var errRefused = errors.New("refused")

// backend is one of the engine's shared session connections
// (WithSessionConns): its server session holds the advisory locks of many
// session leases, at most one per advisory lock key. Its statements run
// one at a time, under mu. A pinger keeps the session alive while it
// holds a lease; when the session ends (a failed statement or ping, or a
// validity that ran out while the process was stopped) every lease on it
// ends with engine.ErrLeaseLost, told before the connection is closed.
type backend struct {
	e    *Engine
	wake chan struct{} // tells the pinger that a lease arrived

	mu   sync.Mutex
	conn *pgxpool.Conn // nil once the backend is dead
	// held maps each advisory lock key the session holds to its lease;
	// a lease stays in it while its release runs, so that no grant of
	// the same key is sent on this session meanwhile (advisory locks are
	// reentrant per session).
	held map[int64]*muxLease
	// idle is the session's idle_session_timeout as this engine set it:
	// the shortest TTL of the leases granted since it last held none, or
	// 0 while the session has the server's own setting. A release leaves
	// it set; the pinger resets it once the backend holds nothing.
	idle time.Duration
	// validFrom is the send time of the last statement that succeeded on
	// the session: the server cannot end it before validFrom + idle.
	validFrom time.Time
	// timer ends every lease at validFrom + life(idle); timerAt is when
	// it fires (zero: not set). A statement sets it only when that instant
	// comes before timerAt, and a timer that fires early sets itself
	// again (see deadline), so that a statement costs no timer change.
	timer   *time.Timer
	timerAt time.Time
	// boundAt is the deadline of the session's socket, which bounds
	// every statement on it without a timer of its own (see bound).
	boundAt time.Time
}

// backendAt returns the live backend of slot i, connecting a new one if
// the slot is empty or its backend died.
func (e *Engine) backendAt(ctx context.Context, i int) (*backend, error) {
	// Both waits end with ctx: another caller may hold the slot while it
	// dials, or the backend while a statement of its runs.
	if !kit.LockCtx(ctx, &e.muxMu) {
		return nil, ctx.Err()
	}
	defer e.muxMu.Unlock()
	if b := e.mux[i]; b != nil {
		if !kit.LockCtx(ctx, &b.mu) {
			return nil, ctx.Err()
		}
		alive := b.conn != nil
		b.mu.Unlock()
		if alive {
			return b, nil
		}
	}
	actx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	c, err := e.pool.Acquire(actx)
	if err != nil {
		return nil, err
	}
	// The shared holders' rows and the revocations of sessions that ended
	// without deleting theirs (a crash, a kill): best effort, as a grant
	// overwrites a row of its own pid and key and Holders skips rows whose
	// backend holds no lock.
	_, _ = c.Exec(actx, e.q.deadTidy)
	// Nothing the backend writes needs a durable commit: the tokens' rule
	// holds without one (see sessionGrant), and its holder rows are
	// unlogged.
	if _, err := c.Exec(actx, "SET synchronous_commit = off"); err != nil {
		e.closeConn(c)
		return nil, err
	}
	b := &backend{e: e, wake: make(chan struct{}, 1), conn: c, held: map[int64]*muxLease{}}
	b.timer = time.AfterFunc(time.Hour, b.deadline)
	b.timer.Stop()
	if !e.frame.Go(b.pinger) {
		b.detach().finish(engine.ErrClosed)
		return nil, engine.ErrClosed
	}
	e.mux[i] = b
	return b, nil
}

// pick returns a live backend whose session does not hold h, locked, or
// nil if every backend holds h. It starts at the next slot in turn, so
// that leases spread over the backends.
func (e *Engine) pick(ctx context.Context, h int64) (*backend, error) {
	n := len(e.mux)
	start := int(e.turn.Add(1))
	for i := range n {
		b, err := e.backendAt(ctx, (start+i)%n)
		if err != nil {
			return nil, err
		}
		if !kit.LockCtx(ctx, &b.mu) {
			return nil, ctx.Err()
		}
		if _, ok := b.held[h]; !ok && b.conn != nil {
			return b, nil
		}
		b.mu.Unlock()
	}
	return nil, nil
}

// muxGrant tries to grant req at once on a shared backend, with the
// try-lock form of the grant statement (see sessionGrant), which the
// server refuses while a conflicting session holds the key or waits for
// it. It returns errRefused when refused, and nil, nil when every backend
// already holds h (the caller pins a connection of its own instead).
func (e *Engine) muxGrant(ctx context.Context, req engine.Request, h int64) (engine.Lease, error) {
	b, err := e.pick(ctx, h)
	if err != nil || b == nil {
		return nil, err
	}
	if ctx.Done() == nil {
		// ctx never ends: the caller has nothing to leave for.
		l, err := b.grantUnlock(req, h)
		if l == nil {
			return nil, err
		}
		return l, nil
	}
	// The statement runs on its own goroutine, bounded by the op timeout
	// rather than ctx (cancelling it would cost the backend every lease
	// it carries), so that the caller can leave when ctx ends.
	res := make(chan muxResult, 1)
	go func() {
		l, err := b.grantUnlock(req, h)
		res <- muxResult{l, err}
	}()
	select {
	case r := <-res:
		if r.l == nil {
			return nil, r.err
		}
		if err := ctx.Err(); err != nil {
			// Granted after the caller gave up: let it go, in the
			// background, so that the caller is not kept for it.
			e.frame.Run(func() { _ = r.l.Release(context.Background()) })
			return nil, err
		}
		return r.l, nil
	case <-ctx.Done():
		e.frame.Run(func() {
			if r := <-res; r.l != nil {
				_ = r.l.Release(context.Background())
			}
		})
		return nil, ctx.Err()
	}
}

// grantUnlock runs grant, unlocks b, then finishes b if the grant found
// its connection dead, and wakes the pinger if the grant armed the
// session's idle timeout.
func (b *backend) grantUnlock(req engine.Request, h int64) (*muxLease, error) {
	armed := b.idle == 0
	l, dead, err := b.grant(req, h)
	armed = armed && l != nil
	b.mu.Unlock()
	if dead != nil {
		dead.finish(fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err))
	}
	if armed {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return l, err
}

// muxResult is a try-grant's answer: the lease, or why there is none.
type muxResult struct {
	l   *muxLease
	err error
}

// grant runs the try-grant of req on b, which the caller holds locked. On
// a failed connection it detaches b and returns what to finish once b is
// unlocked.
func (b *backend) grant(req engine.Request, h int64) (*muxLease, *deadBackend, error) {
	e := b.e
	idle := req.TTL
	if len(b.held) > 0 {
		idle = min(idle, b.idle)
	}
	shared, set := 0, 0
	if req.Mode == engine.Shared {
		shared = 1
	}
	if b.idle == 0 || idleTimeout(idle) != idleTimeout(b.idle) {
		set = 1
	}
	var (
		ok    bool
		token *int64
	)
	b.bound()
	sent := time.Now()
	err := b.conn.QueryRow(context.Background(), e.q.muxTry[shared][set], h, idleTimeout(idle), req.Key,
		int(req.Mode), req.Value).Scan(&ok, &token)
	switch {
	case err != nil && sqlState(err) != "" && !b.conn.Conn().IsClosed():
		// A server error that leaves the session open (a full lock
		// table, a missing privilege), but the lock may have been taken
		// before it (session advisory locks outlive their
		// transaction): this session did not hold h, so an unlock of h
		// frees exactly that.
		if uerr := b.undo(req.Mode, h); uerr != nil {
			return nil, b.detach(), err
		}
		return nil, nil, err
	case err != nil:
		return nil, b.detach(), err
	case !ok:
		b.touch(sent)
		return nil, nil, errRefused
	case token == nil:
		_ = b.undo(req.Mode, h)
		return nil, nil, errors.New("the grant drew no token")
	}
	b.idle = idle
	b.touch(sent)
	l := &muxLease{b: b, key: req.Key, mode: req.Mode, token: uint64(*token), hash: h,
		sig: kit.NewSignal(req.OnLost)}
	if err := e.frame.Track(l, func() error { return nil }); err != nil {
		_ = b.undo(req.Mode, h)
		return nil, nil, err
	}
	b.held[h] = l
	if !req.Renew {
		l.timer = time.AfterFunc(life(req.TTL)-time.Since(sent), l.expire)
	}
	return l, nil, nil
}

// undo unlocks h in mode on b's session, after a grant that failed.
func (b *backend) undo(mode engine.Mode, h int64) error {
	fn := "pg_advisory_unlock"
	if mode == engine.Shared {
		fn = "pg_advisory_unlock_shared"
	}
	b.bound()
	_, err := b.conn.Exec(context.Background(), "SELECT "+fn+"($1::bigint)", h)
	return err
}

// bound sets the deadline of b's socket to one and a half op timeouts from
// now, if less than half of one is left: every statement sent on b with a
// context that cannot end is cut (which ends b) within one to one and a
// half op timeouts, and only one statement in many pays for a timer. The
// caller holds b.mu.
func (b *backend) bound() {
	now := time.Now()
	if b.boundAt.Sub(now) >= b.e.cfg.opTimeout/2 {
		return
	}
	b.boundAt = now.Add(b.e.cfg.opTimeout * 3 / 2)
	_ = b.conn.Conn().PgConn().Conn().SetDeadline(b.boundAt)
}

// unbound clears the deadline of b's socket before a statement that its
// context bounds instead: a deadline left from bound would cut it once it
// passed, however long the leases' validity (a backend whose leases are
// only pinged for longer than an op timeout). The caller holds b.mu.
func (b *backend) unbound() {
	if b.boundAt.IsZero() {
		return
	}
	b.boundAt = time.Time{}
	_ = b.conn.Conn().PgConn().Conn().SetDeadline(time.Time{})
}

// touch records a statement sent at sent that succeeded, which moves the
// deadline of b's leases to sent + life(idle). The caller holds b.mu.
func (b *backend) touch(sent time.Time) {
	if sent.After(b.validFrom) {
		b.validFrom = sent
	}
	b.arm()
}

// arm sets b's timer for the deadline of its leases, validFrom +
// life(idle), unless it is set to fire no later. The caller holds b.mu.
func (b *backend) arm() {
	if b.idle == 0 {
		return
	}
	at := b.validFrom.Add(life(b.idle))
	if !b.timerAt.IsZero() && !at.Before(b.timerAt) {
		return
	}
	b.timerAt = at
	b.timer.Reset(time.Until(at))
}

// deadline ends every lease of b when its validity ran out without a
// statement that succeeded (this process was stopped, or a ping hung):
// the server may have ended the session since. Fired early (a statement
// moved the deadline on since the timer was set), it sets the timer again.
func (b *backend) deadline() {
	b.mu.Lock()
	b.timerAt = time.Time{}
	if b.conn == nil || len(b.held) == 0 {
		b.mu.Unlock()
		return
	}
	if time.Since(b.validFrom) < life(b.idle) {
		b.arm()
		b.mu.Unlock()
		return
	}
	dead := b.detach()
	b.mu.Unlock()
	dead.finish(fmt.Errorf("%w: the lease period ran out before a ping", engine.ErrLeaseLost))
}

// pinger pings b's session every third of its idle timeout while it holds
// a lease, which resets the server's idle clock, until b dies or the
// engine closes. A ping that fails, or does not answer within the
// leases' validity, ends every lease of b.
func (b *backend) pinger() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		b.mu.Lock()
		alive, idle := b.conn != nil, b.idle
		b.mu.Unlock()
		if !alive {
			return
		}
		var tick <-chan time.Time
		if idle > 0 {
			t.Reset(max(idle/3, time.Millisecond))
			tick = t.C
		}
		select {
		case <-b.e.frame.Closing():
			return
		case <-b.wake:
			continue
		case <-tick:
		}
		if !b.ping() {
			return
		}
	}
}

// ping pings b's session once if it holds a lease, resets its idle
// timeout to the server's own if it holds none, and reports whether b is
// still alive.
func (b *backend) ping() bool {
	b.mu.Lock()
	if b.conn == nil || b.idle == 0 {
		alive := b.conn != nil
		b.mu.Unlock()
		return alive
	}
	if len(b.held) == 0 {
		// Nothing to keep alive: the session may idle again, which keeps
		// an idle engine from pinging. A lease granted later sets the
		// timeout again.
		b.bound()
		_, err := b.conn.Exec(context.Background(), "RESET idle_session_timeout")
		if err == nil {
			b.idle = 0
			b.mu.Unlock()
			return true
		}
		dead := b.detach()
		b.mu.Unlock()
		dead.finish(fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err))
		return false
	}
	b.unbound() // ctx bounds the ping, which may take longer than an op timeout
	ctx, cancel := context.WithDeadline(context.Background(), b.validFrom.Add(life(b.idle)))
	sent := time.Now()
	var revoked []*muxLease
	err := b.e.readRevoked(ctx, b.conn, func(key string, token uint64) {
		if l := b.held[b.e.cfg.hash(key)]; l != nil && l.key == key && l.token == token {
			revoked = append(revoked, l)
		}
	})
	cancel()
	if err == nil {
		b.touch(sent)
		b.mu.Unlock()
		for _, l := range revoked {
			l.end(engine.ErrReleasedByOperator) // told, then unlocked
		}
		return true
	}
	dead := b.detach()
	b.mu.Unlock()
	dead.finish(fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err))
	return false
}

// deadBackend is what is left to do for a backend taken out of service:
// tell its leases, then close its connection, which frees their locks.
type deadBackend struct {
	e      *Engine
	conn   *pgxpool.Conn
	leases []*muxLease
	tidy   bool // the connection works: delete the session's holder rows and revocations first
}

// detach takes b out of service: no statement runs on it from then on.
// The caller holds b.mu, and calls finish on the result once it has let
// go of b.mu.
func (b *backend) detach() *deadBackend {
	d := &deadBackend{e: b.e, conn: b.conn}
	for _, l := range b.held {
		d.leases = append(d.leases, l)
	}
	b.conn, b.held = nil, map[int64]*muxLease{}
	b.timer.Stop()
	b.timerAt = time.Time{}
	return d
}

// finish ends the leases of a detached backend with err, then closes its
// connection, which ends its session and frees every lock it held.
func (d *deadBackend) finish(err error) {
	for _, l := range d.leases {
		if l.timer != nil {
			l.timer.Stop()
		}
		l.sig.Close(err)
		d.e.frame.Forget(l)
	}
	if d.conn == nil {
		return
	}
	if d.tidy && len(d.leases) > 0 {
		_ = d.conn.Conn().PgConn().Conn().SetDeadline(time.Time{}) // see unbound
		ctx, cancel := d.e.core.OpCtx()
		_, _ = d.conn.Exec(ctx, d.e.q.sessionTidy)
		cancel()
	}
	d.e.closeConn(d.conn)
}

// closeConn closes a connection taken from the pool, which ends its server
// session and every advisory lock of the session.
func (e *Engine) closeConn(c *pgxpool.Conn) {
	raw := c.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = raw.Close(ctx)
	cancel()
}

// closeMux ends the leases on the shared backends with engine.ErrClosed
// and closes their connections. Close calls it once the engine's
// goroutines have stopped.
func (e *Engine) closeMux() {
	e.muxMu.Lock()
	defer e.muxMu.Unlock()
	for i, b := range e.mux {
		if b == nil {
			continue
		}
		b.mu.Lock()
		var dead *deadBackend
		if b.conn != nil {
			dead = b.detach()
			dead.tidy = true
		}
		b.mu.Unlock()
		if dead != nil {
			dead.finish(engine.ErrClosed)
		}
		e.mux[i] = nil
	}
}

// muxLease is a session lease on a shared backend.
type muxLease struct {
	b      *backend
	key    string
	mode   engine.Mode
	token  uint64
	hash   int64
	sig    *kit.Signal
	timer  *time.Timer // ends a lease without Renew when its TTL runs out
	ending bool        // under b.mu: its release has begun
}

func (l *muxLease) Key() string           { return l.key }
func (l *muxLease) Mode() engine.Mode     { return l.mode }
func (l *muxLease) Token() uint64         { return l.token }
func (l *muxLease) Done() <-chan struct{} { return l.sig.Done() }
func (l *muxLease) Err() error            { return l.sig.Err() }

// expire ends a lease without Renew when its validity has run out.
func (l *muxLease) expire() { l.end(engine.ErrLeaseLost) }

// claim marks l as releasing and reports whether it was held. The lease
// stays in b.held until its unlock has run.
func (l *muxLease) claim() bool {
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[l.hash] != l || l.ending {
		return false
	}
	l.ending = true
	if l.timer != nil {
		l.timer.Stop()
	}
	return true
}

// unlock runs the release statement of l on its backend (see
// sessionRelease) and reports whether the session held the lock. On a
// failed connection the backend is detached and finished with a lost
// lease error, which tells its other leases.
func (l *muxLease) unlock() (held bool, err error) {
	b := l.b
	b.mu.Lock()
	if b.held[l.hash] != l || b.conn == nil {
		b.mu.Unlock()
		return false, nil // the backend died meanwhile; its close freed the lock
	}
	delete(b.held, l.hash)
	q, args := b.e.q.muxRelease[0], []any{l.hash}
	if l.mode == engine.Shared {
		q, args = b.e.q.muxRelease[1], []any{l.hash, l.key}
	}
	b.bound()
	sent := time.Now()
	err = b.conn.QueryRow(context.Background(), q, args...).Scan(&held)
	var dead *deadBackend
	if err == nil {
		b.touch(sent)
	} else {
		dead = b.detach()
	}
	b.mu.Unlock()
	if dead != nil {
		dead.finish(fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err))
	}
	return held, err
}

// Release releases the advisory lock of l (and clears a shared lease's
// holder row), on its backend, in one statement. A lease that has ended returns an error
// wrapping engine.ErrNotHeld; so does one whose connection fails now (the
// connection is closed, which frees the lock, and every other lease on it
// ends with engine.ErrLeaseLost). The statement runs even if ctx is
// cancelled, bounded by the engine's op timeout.
func (l *muxLease) Release(ctx context.Context) error {
	if !l.claim() {
		return fmt.Errorf("%w: %q (lease ended: %w)", engine.ErrNotHeld, l.key, l.sig.Err())
	}
	held, err := l.unlock()
	l.b.e.frame.Forget(l)
	if err != nil {
		l.sig.Close(fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err))
		return l.sig.NotHeld(l.key)
	}
	if !held {
		return l.sig.NotHeld(l.key)
	}
	l.sig.Close(engine.ErrReleased)
	return nil
}

// end closes the lease with err, then releases its lock.
func (l *muxLease) end(err error) {
	if !l.claim() {
		return
	}
	l.sig.Close(err) // told before the lock is freed
	_, _ = l.unlock()
	l.b.e.frame.Forget(l)
}

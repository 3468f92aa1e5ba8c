package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// errRefused is muxGrant's error when GET_LOCK(name, 0) found the name held
// by another session.
var errRefused = errors.New("refused")

// backend is one of the session strategy's shared connections
// (WithSessionConns): its server session holds the lock names of many
// leases, each name at most once (GET_LOCK is reentrant per session). Its
// statements run one at a time, under mu. A pinger keeps the session
// inside its wait_timeout while it holds a lease and reads the
// revocations of ForceRelease; when the session ends (a failed statement
// or ping, or a validity that ran out while the process was stopped) every
// lease on it ends with engine.ErrLeaseLost, told before the connection is
// closed.
type backend struct {
	e    *Engine
	wake chan struct{} // tells the pinger that a lease arrived

	mu sync.Mutex
	rc *rowConn // nil once the backend is dead
	// held maps each lock name the session holds to its lease; a lease
	// stays in it while its release runs, so that no grant of the same
	// name is sent on this session meanwhile.
	held map[string]*muxLease
	// idle is the shortest TTL of the leases granted since the session
	// last held none, or 0 once the pinger put the server's own
	// wait_timeout back; the session's wait_timeout is idleTimeout(idle).
	idle time.Duration
	// validFrom is the send time of the last statement that succeeded on
	// the session: the server cannot end it before validFrom + idle.
	validFrom time.Time
	// timer ends every lease at validFrom + life(idle); timerAt is when
	// it fires (zero: not set). A statement sets it only when that instant
	// comes before timerAt, and a timer that fires early sets itself
	// again (see deadline).
	timer   *time.Timer
	timerAt time.Time
}

// backendAt returns the live backend of slot i, pinning a new connection
// if the slot is empty or its backend died.
func (e *Engine) backendAt(ctx context.Context, i int) (*backend, error) {
	if !kit.LockCtx(ctx, &e.muxMu) {
		return nil, ctx.Err()
	}
	defer e.muxMu.Unlock()
	if b := e.mux[i]; b != nil {
		if !kit.LockCtx(ctx, &b.mu) {
			return nil, ctx.Err()
		}
		alive := b.rc != nil
		b.mu.Unlock()
		if alive {
			return b, nil
		}
	}
	actx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	rc, err := e.getConn(actx)
	if err != nil {
		return nil, err
	}
	b := &backend{e: e, wake: make(chan struct{}, 1), rc: rc, held: map[string]*muxLease{}}
	b.timer = time.AfterFunc(time.Hour, b.deadline)
	b.timer.Stop()
	if !e.frame.Go(b.pinger) {
		b.detach().finish(engine.ErrClosed)
		return nil, engine.ErrClosed
	}
	e.mux[i] = b
	return b, nil
}

// pick returns a live backend whose session does not hold name, locked,
// or nil if every backend holds it. It starts at the next slot in turn, so
// that leases spread over the backends.
func (e *Engine) pick(ctx context.Context, name string) (*backend, error) {
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
		if _, ok := b.held[name]; !ok && b.rc != nil {
			return b, nil
		}
		b.mu.Unlock()
	}
	return nil, nil
}

// muxGrant tries to grant req at once on a shared backend, with the
// session strategy's one-statement try (GET_LOCK(name, 0); see
// sessionGrant). It returns errRefused when the name is held, and nil, nil
// when every backend already holds the name (the caller pins a connection
// of its own instead).
func (e *Engine) muxGrant(ctx context.Context, req engine.Request, name string) (engine.Lease, error) {
	b, err := e.pick(ctx, name)
	if err != nil || b == nil {
		return nil, err
	}
	if ctx.Done() == nil {
		// ctx never ends: the caller has nothing to leave for.
		l, err := b.grantUnlock(req, name)
		if l == nil {
			return nil, err
		}
		return l, nil
	}
	// The statement runs on its own goroutine, bounded by the op timeout
	// rather than ctx (cancelling it would cut the connection, and every
	// lease it carries), so that the caller can leave when ctx ends.
	res := make(chan muxResult, 1)
	go func() {
		l, err := b.grantUnlock(req, name)
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

// muxResult is a try-grant's answer: the lease, or why there is none.
type muxResult struct {
	l   *muxLease
	err error
}

// grantUnlock runs grant, unlocks b, then finishes b if the grant found
// its connection dead, and wakes the pinger if the grant armed the
// session's wait_timeout.
func (b *backend) grantUnlock(req engine.Request, name string) (*muxLease, error) {
	armed := b.idle == 0
	l, dead, err := b.grant(req, name)
	armed = armed && b.idle != 0
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

// opCtx is the context of one statement on b: the op timeout bounds it,
// and a statement it cuts short cuts the connection (the driver closes
// it), which ends b.
func (b *backend) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), b.e.cfg.opTimeout)
}

// grant runs the try-grant of req on b, which the caller holds locked,
// after lowering the session's wait_timeout to req's period if it is
// shorter than the leases' on b. On a failed connection it detaches b and
// returns what to finish once b is unlocked.
func (b *backend) grant(req engine.Request, name string) (*muxLease, *deadBackend, error) {
	e := b.e
	idle := req.TTL
	if len(b.held) > 0 {
		idle = min(idle, b.idle)
	}
	ctx, cancel := b.opCtx()
	defer cancel()
	secs := idleTimeout(idle)
	if b.rc.idleMax != secs {
		sent := time.Now()
		if _, err := b.rc.conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d", secs)); err != nil {
			return nil, b.detach(), err
		}
		b.rc.idleMax, b.idle = secs, idle
		b.touch(sent)
	}
	sent := time.Now()
	res, err := b.rc.conn.ExecContext(ctx, e.q.sessTry, name, req.Key, req.Value, secs, name)
	var n, token int64
	if err == nil {
		if n, err = res.RowsAffected(); err == nil && n > 0 {
			token, err = res.LastInsertId()
		}
	}
	switch {
	case err != nil && errNumber(err) != 0:
		// A server error that leaves the session open (a full names
		// table, a missing privilege), but GET_LOCK may have granted the
		// name before it: this session did not hold it, so one
		// RELEASE_LOCK frees exactly that.
		if _, uerr := b.rc.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", name); uerr != nil {
			return nil, b.detach(), err
		}
		return nil, nil, err
	case err != nil:
		return nil, b.detach(), err
	case n == 0:
		b.touch(sent)
		return nil, nil, errRefused
	}
	b.idle = idle
	b.touch(sent)
	l := &muxLease{b: b, key: req.Key, name: name, token: uint64(token), sig: kit.NewSignal(req.OnLost)}
	if err := e.frame.Track(l, func() error { return nil }); err != nil {
		if _, uerr := b.rc.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", name); uerr != nil {
			return nil, b.detach(), err
		}
		return nil, nil, err
	}
	b.held[name] = l
	if !req.Renew {
		l.timer = time.AfterFunc(life(req.TTL)-time.Since(sent), l.expire)
	}
	return l, nil, nil
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
	if b.rc == nil || len(b.held) == 0 {
		b.mu.Unlock()
		return
	}
	if time.Since(b.validFrom) < life(b.idle) {
		b.arm()
		b.mu.Unlock()
		return
	}
	b.expired()
}

// expired ends every lease of b, whose validity has run out, with
// engine.ErrLeaseLost, or engine.ErrReleasedByOperator for those a force
// release revoked meanwhile when this process was stopped past the
// validity (see revokedWhileStopped). The caller holds b.mu, which
// expired lets go.
func (b *backend) expired() {
	late := time.Since(b.validFrom) - life(b.idle)
	dead := b.detach()
	b.mu.Unlock()
	if late > stoppedAfter {
		dead.revokedWhileStopped()
	}
	dead.finish(fmt.Errorf("%w: the lease period ran out before a ping", engine.ErrLeaseLost))
}

// stoppedAfter is how late past its leases' validity a backend's timer or
// pinger must run for expired to take this process for stopped (or
// starved) rather than its pings for hung.
const stoppedAfter = 100 * time.Millisecond

// revokedBound bounds revokedWhileStopped's read: the leases it ends are
// past their validity already, and must not wait long for their reason.
const revokedBound = 250 * time.Millisecond

// revokedWhileStopped ends with engine.ErrReleasedByOperator, before finish
// tells the rest, the leases of d whose tokens a force release recorded
// as released: a stopped holder cannot read its revocation, and the
// releaser kills the connection (or the server cuts it) in the meantime,
// and the name may have been granted again since (which keeps the
// released token, but not the connection, in the name's row).
// One read on another connection, bounded by revokedBound; on an error
// the leases keep engine.ErrLeaseLost.
func (d *deadBackend) revokedWhileStopped() {
	if d.rc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(d.e.cfg.opTimeout, revokedBound))
	defer cancel()
	rows, err := d.e.db.QueryContext(ctx, d.e.q.sessReleased)
	if err != nil {
		return
	}
	defer rows.Close()
	revoked := map[string]uint64{}
	for rows.Next() {
		var (
			name  string
			token uint64
		)
		if rows.Scan(&name, &token) != nil {
			return
		}
		revoked[name] = token
	}
	if rows.Err() != nil {
		return
	}
	for _, l := range d.leases {
		if t, ok := revoked[l.name]; ok && t == l.token {
			if l.timer != nil {
				l.timer.Stop()
			}
			l.sig.Close(fmt.Errorf("%w: %q", engine.ErrReleasedByOperator, l.key))
		}
	}
}

// pinger pings b's session every third of its lease period while it holds
// a lease, which resets the server's idle clock, until b dies or the
// engine closes. A ping that fails, or does not answer within the
// leases' validity, ends every lease of b.
func (b *backend) pinger() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		b.mu.Lock()
		alive, idle := b.rc != nil, b.idle
		b.mu.Unlock()
		if !alive {
			return
		}
		var tick <-chan time.Time
		if idle > 0 {
			t.Reset(max(min(idle/3, b.e.cfg.connCheck), time.Millisecond))
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

// ping reads b's revoked leases, which is also the ping that keeps its
// session alive, and ends them with engine.ErrReleasedByOperator (told,
// then unlocked); once b holds nothing it puts the server's own
// wait_timeout back instead. It reports whether b is still alive.
func (b *backend) ping() bool {
	b.mu.Lock()
	if b.rc == nil || b.idle == 0 {
		alive := b.rc != nil
		b.mu.Unlock()
		return alive
	}
	if len(b.held) == 0 {
		// Nothing to keep alive: the session may idle again, which keeps
		// an idle engine from pinging. A lease granted later sets the
		// timeout again.
		ctx, cancel := b.opCtx()
		_, err := b.rc.conn.ExecContext(ctx, "SET SESSION wait_timeout = DEFAULT")
		cancel()
		if err == nil {
			b.idle, b.rc.idleMax = 0, 0
			b.mu.Unlock()
			return true
		}
		dead := b.detach()
		b.mu.Unlock()
		dead.finish(fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err))
		return false
	}
	if time.Since(b.validFrom) >= life(b.idle) {
		b.expired() // the pinger ran late: this process was stopped
		return false
	}
	ctx, cancel := context.WithDeadline(context.Background(), b.validFrom.Add(life(b.idle)))
	sent := time.Now()
	revoked, err := b.readRevoked(ctx)
	cancel()
	if err == nil {
		b.touch(sent)
		b.mu.Unlock()
		for _, l := range revoked {
			l.end(engine.ErrReleasedByOperator)
		}
		return true
	}
	dead := b.detach()
	b.mu.Unlock()
	dead.finish(fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err))
	return false
}

// readRevoked returns b's leases whose token a force release recorded as
// released (sessRevoke). The caller holds b.mu.
func (b *backend) readRevoked(ctx context.Context) ([]*muxLease, error) {
	rows, err := b.rc.conn.QueryContext(ctx, b.e.q.sessRevoked, b.rc.id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*muxLease
	for rows.Next() {
		var (
			name  string
			token uint64
		)
		if err := rows.Scan(&name, &token); err != nil {
			return nil, err
		}
		if l := b.held[name]; l != nil && l.token == token {
			out = append(out, l)
		}
	}
	return out, rows.Err()
}

// deadBackend is what is left to do for a backend taken out of service:
// tell its leases, then close its connection, which frees their names.
type deadBackend struct {
	e      *Engine
	rc     *rowConn
	leases []*muxLease
}

// detach takes b out of service: no statement runs on it from then on.
// The caller holds b.mu, and calls finish on the result once it has let
// go of b.mu.
func (b *backend) detach() *deadBackend {
	d := &deadBackend{e: b.e, rc: b.rc}
	for _, l := range b.held {
		d.leases = append(d.leases, l)
	}
	b.rc, b.held = nil, map[string]*muxLease{}
	b.timer.Stop()
	b.timerAt = time.Time{}
	return d
}

// finish ends the leases of a detached backend with err, then closes its
// connection, which ends its session and frees every name it held.
func (d *deadBackend) finish(err error) {
	for _, l := range d.leases {
		if l.timer != nil {
			l.timer.Stop()
		}
		l.sig.Close(err)
		d.e.frame.Forget(l)
	}
	if d.rc != nil {
		d.e.discard(d.rc)
	}
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
		if b.rc != nil {
			dead = b.detach()
		}
		b.mu.Unlock()
		if dead != nil {
			dead.finish(engine.ErrClosed)
		}
		e.mux[i] = nil
	}
}

// connID returns the CONNECTION_ID() of b's session, 0 once b is dead.
func (b *backend) connID() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rc == nil {
		return 0
	}
	return b.rc.id
}

// muxLease is a session lease whose lock name a shared backend holds.
type muxLease struct {
	b      *backend
	key    string
	name   string // the lock name
	token  uint64
	sig    *kit.Signal
	timer  *time.Timer // ends a lease without Renew when its TTL runs out
	ending bool        // under b.mu: its release has begun
}

func (l *muxLease) Key() string           { return l.key }
func (l *muxLease) Mode() engine.Mode     { return engine.Exclusive }
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
	if b.held[l.name] != l || l.ending {
		return false
	}
	l.ending = true
	if l.timer != nil {
		l.timer.Stop()
	}
	return true
}

// unlock runs RELEASE_LOCK of l's name on its backend and reports whether
// the session held it. On a failed connection the backend is detached and
// finished with a lost lease error, which tells its other leases.
func (l *muxLease) unlock() (held bool, err error) {
	b := l.b
	b.mu.Lock()
	if b.held[l.name] != l || b.rc == nil {
		b.mu.Unlock()
		return false, nil // the backend died meanwhile; its close freed the name
	}
	delete(b.held, l.name)
	ctx, cancel := b.opCtx()
	sent := time.Now()
	var got sql.NullInt64
	err = b.rc.conn.QueryRowContext(ctx, b.e.q.sessRelease, l.name).Scan(&got)
	cancel()
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
	return got.Valid && got.Int64 == 1, err
}

// Release runs RELEASE_LOCK of the lease's name on its shared connection.
// A lease that has ended returns an error wrapping engine.ErrNotHeld; so
// does one whose connection fails now (the connection is closed, which
// frees the name, and every other lease on it ends with
// engine.ErrLeaseLost). The statement runs even if ctx is cancelled,
// bounded by the engine's op timeout.
func (l *muxLease) Release(context.Context) error {
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

// end closes the lease with err, then releases its name.
func (l *muxLease) end(err error) {
	if !l.claim() {
		return
	}
	l.sig.Close(err) // told before the name is freed
	_, _ = l.unlock()
	l.b.e.frame.Forget(l)
}

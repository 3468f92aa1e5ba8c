package sqlcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// The session strategies' shared connections, written once for both
// engines: a Mux keeps a few server sessions, each holding the locks of
// many leases (PostgreSQL's advisory locks, MySQL's GET_LOCK names), one
// statement at a time per session. A pinger keeps each session inside its
// server's idle cut-off while it holds a lease and reads the revocations
// of ForceRelease; when a session ends (a failed statement or ping, or a
// validity that ran out while the process was stopped) every lease on it
// ends with engine.ErrLeaseLost, told before the connection is closed.
// The engine supplies the statements (MuxConn) and the connections
// (MuxDriver). K is the engine's lock identity on a session (the advisory
// lock key, the lock name): a session never gets a grant of a K it holds,
// as both servers' session locks are reentrant.

// ErrRefused is Mux.Grant's error when the server refused the try-lock:
// another session holds the lock, or (PostgreSQL) waits for it ahead of
// this request.
var ErrRefused = errors.New("refused")

// MuxConn is one shared session connection, as its engine drives it. The
// Mux calls one method at a time, and none after Close.
type MuxConn[K comparable] interface {
	// Grant runs the try-grant of req, lock k, and sets the session's
	// idle cut-off for a lease period of idle if it has another (at
	// least when it grants). On an error that leaves the connection
	// usable, Grant has let go of a lock the statement took before it
	// failed.
	Grant(req engine.Request, k K, idle time.Duration) (MuxAnswer, error)
	// Undo lets go of k, granted to req by the last Grant, which the Mux
	// could not keep (the engine was closing).
	Undo(req engine.Request, k K) error
	// Unlock releases the lock of l and reports whether the session held
	// it.
	Unlock(l *MuxLease[K]) (held bool, err error)
	// Ping sends one statement, bounded by deadline, which resets the
	// server's idle clock of the session, and returns the leases that a
	// force release revoked, found by their lock with find (nil for a
	// lock the session does not hold).
	Ping(deadline time.Time, find func(K) *MuxLease[K]) ([]*MuxLease[K], error)
	// Rest puts the server's own idle cut-off back: the session holds
	// nothing.
	Rest() error
	// Close ends the session, which frees every lock it holds; with
	// tidy, the connection works, and what the session's leases left in
	// tables may be deleted first.
	Close(tidy bool)
}

// MuxAnswer is what MuxConn.Grant found.
type MuxAnswer struct {
	// Token is the lease's token, if Granted.
	Token   uint64
	Granted bool
	// Cut is the lease period the session's idle cut-off is set for once
	// Grant has returned: its idle if it set it, else what it was (0
	// for the server's own). The server cuts the session no sooner than
	// that after its last statement.
	Cut time.Duration
	// Dead, with an error: the connection is unusable.
	Dead bool
	// Free, if Granted, is when the lease's lock may be freed
	// (MuxLease.Free): zero for at once.
	Free time.Time
}

// MuxDriver makes a Mux's connections.
type MuxDriver[K comparable] interface {
	// Dial connects a new shared session, bounded by ctx.
	Dial(ctx context.Context) (MuxConn[K], error)
	// Revoked returns those of leases, held on a session that has ended,
	// that a force release revoked, read on another connection: a
	// process stopped past its leases' validity could not read its
	// revocations. It returns quickly (the leases are told once it has),
	// and nil when it cannot tell.
	Revoked(leases []*MuxLease[K]) []*MuxLease[K]
}

// MuxConfig is a Mux's configuration.
type MuxConfig struct {
	// Conns is the number of shared sessions, at least 1.
	Conns int
	// MaxPing, if positive, bounds the time between two pings of a
	// session that holds a lease; they come every third of the shortest
	// period of its leases at most.
	MaxPing time.Duration
}

// stoppedAfter is how late past its leases' validity a session's timer or
// pinger must run for the Mux to take this process for stopped (or
// starved) rather than its pings for hung: then it asks MuxDriver.Revoked
// for the reason of each lease.
const stoppedAfter = 100 * time.Millisecond

// Mux is an engine's shared session connections. It is safe for
// concurrent use.
type Mux[K comparable] struct {
	frame *kit.Base[engine.Lease]
	drv   MuxDriver[K]
	cfg   MuxConfig

	mu    sync.Mutex // guards the slots
	slots []*muxBackend[K]
	// last is the slot of the backend that ran the last grant or
	// release: see pick.
	last atomic.Int32
}

// NewMux returns the shared sessions of an engine whose frame is frame.
// It connects none until the first grant.
func NewMux[K comparable](frame *kit.Base[engine.Lease], drv MuxDriver[K], cfg MuxConfig) *Mux[K] {
	return &Mux[K]{frame: frame, drv: drv, cfg: cfg, slots: make([]*muxBackend[K], max(cfg.Conns, 1))}
}

// muxBackend is one shared session. Its statements run one at a time,
// under mu.
type muxBackend[K comparable] struct {
	m    *Mux[K]
	slot int
	wake chan struct{} // tells the pinger that a lease arrived
	// load is len(held), for pick to read without mu.
	load atomic.Int32

	mu   sync.Mutex
	conn MuxConn[K] // nil once the backend is dead
	// held maps each lock the session holds to its lease; a lease stays
	// in it while its release runs, so that no grant of the same lock is
	// sent on this session meanwhile.
	held map[K]*MuxLease[K]
	// idle is the lease period the session's idle cut-off is set for:
	// the shortest of the leases granted since it last held none, or 0
	// once Rest put the server's own back.
	idle time.Duration
	// validFrom is the send time of the last statement that succeeded on
	// the session: the server cannot end it before validFrom + idle.
	validFrom time.Time
	// timer ends every lease at validFrom + Life(idle); timerAt is when it
	// fires (zero: not set). A statement sets it only when that instant
	// comes before timerAt, and a timer that fires early sets itself
	// again (see deadline), so that a statement costs no timer change.
	timer   *time.Timer
	timerAt time.Time
}

// Life is how long after sending a statement that succeeded a session
// lease of period ttl counts as held: ttl less engine.Margin, so that Done
// closes ahead of the server's cut-off even when this process's timers
// run late.
func Life(ttl time.Duration) time.Duration { return ttl - engine.Margin(ttl) }

// backendAt returns the live backend of slot i, dialling a new one if the
// slot is empty or its backend died.
func (m *Mux[K]) backendAt(ctx context.Context, i int) (*muxBackend[K], error) {
	// Both waits end with ctx: another caller may hold the slot while it
	// dials, or the backend while a statement of its runs.
	if !kit.LockCtx(ctx, &m.mu) {
		return nil, ctx.Err()
	}
	defer m.mu.Unlock()
	if b := m.slots[i]; b != nil {
		if !kit.LockCtx(ctx, &b.mu) {
			return nil, ctx.Err()
		}
		alive := b.conn != nil
		b.mu.Unlock()
		if alive {
			return b, nil
		}
	}
	c, err := m.drv.Dial(ctx)
	if err != nil {
		return nil, err
	}
	b := &muxBackend[K]{m: m, slot: i, wake: make(chan struct{}, 1), conn: c, held: map[K]*MuxLease[K]{}}
	b.timer = time.AfterFunc(time.Hour, b.deadline)
	b.timer.Stop()
	if !m.frame.Go(b.pinger) {
		b.detach().finish(engine.ErrClosed)
		return nil, engine.ErrClosed
	}
	m.slots[i] = b
	return b, nil
}

// pick returns a live backend whose session does not hold k, locked, or
// nil if every backend holds it. It prefers the backend that holds the
// fewest leases, so that leases spread over the backends, and among those
// the one that ran the last statement (Mux.last), so that a process that
// takes one lock after another talks to one server session: on a machine
// whose idle cores sleep, a statement sent to a session that has been
// waiting longer costs a wake-up on each side (alternating two sessions cost
// a third of an uncontended cycle). A backend busy with another caller's
// statement is passed over for a free or new one first, so that callers
// at once do not queue behind each other while a slot is free.
func (m *Mux[K]) pick(ctx context.Context, k K) (*muxBackend[K], error) {
	// m.mu is held by a caller that dials (backendAt): every wait for it
	// ends with ctx.
	order, backends, err := m.order(ctx)
	if err != nil {
		return nil, err
	}
	for j, i := range order {
		// The slot as order read it: one that has changed since is
		// dialled or locked afresh by lockAt.
		if b := backends[j]; b != nil {
			if !b.mu.TryLock() {
				continue // busy: a free or new one first
			}
			if _, ok := b.held[k]; !ok && b.conn != nil {
				return b, nil
			}
			alive := b.conn != nil
			b.mu.Unlock()
			if alive {
				continue // it holds k
			}
		}
		// An empty slot, or a dead backend: dial it rather than wait
		// for a busy one.
		if b, err := m.lockAt(ctx, i, k); b != nil || err != nil {
			return b, err
		}
	}
	for _, i := range order {
		if b, err := m.lockAt(ctx, i, k); b != nil || err != nil {
			return b, err
		}
	}
	return nil, nil
}

// lockAt returns the live backend of slot i (dialled if need be), locked,
// or nil if its session holds k.
func (m *Mux[K]) lockAt(ctx context.Context, i int, k K) (*muxBackend[K], error) {
	b, err := m.backendAt(ctx, i)
	if err != nil {
		return nil, err
	}
	if !kit.LockCtx(ctx, &b.mu) {
		return nil, ctx.Err()
	}
	if _, ok := b.held[k]; !ok && b.conn != nil {
		return b, nil
	}
	b.mu.Unlock()
	return nil, nil
}

// order returns the slots in the order pick tries them, and their
// backends then (nil for an empty slot): live backends by load, the last
// one used first among equals, then the empty or dead slots; or ctx's
// error if it ends while another caller holds m.mu.
func (m *Mux[K]) order(ctx context.Context) ([]int, []*muxBackend[K], error) {
	if !kit.LockCtx(ctx, &m.mu) {
		return nil, nil, ctx.Err()
	}
	defer m.mu.Unlock()
	last := int(m.last.Load())
	rank := func(i int) (empty bool, load int32) {
		b := m.slots[i]
		if b == nil {
			return true, 0
		}
		return false, b.load.Load()
	}
	order := make([]int, len(m.slots))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ea, la := rank(a)
		eb, lb := rank(b)
		switch {
		case la != lb:
			return cmp.Compare(la, lb)
		case ea != eb:
			if ea {
				return 1
			}
			return -1
		case a == last:
			return -1
		case b == last:
			return 1
		}
		return 0
	})
	backends := make([]*muxBackend[K], len(order))
	for j, i := range order {
		backends[j] = m.slots[i]
	}
	return order, backends, nil
}

// Grant tries to grant req, lock k, at once on a shared session. It
// returns ErrRefused when the server refused, and nil, nil when every
// session already holds k (the caller pins a connection of its own
// instead). The statement is bounded by the engine's op timeout, not by
// ctx (cutting it would cost the session every lease it carries): when
// ctx ends first, Grant returns, and a grant that comes after is released
// in the background.
func (m *Mux[K]) Grant(ctx context.Context, req engine.Request, k K) (engine.Lease, error) {
	b, err := m.pick(ctx, k)
	if err != nil || b == nil {
		return nil, err
	}
	if ctx.Done() == nil {
		// ctx never ends: the caller has nothing to leave for.
		l, err := b.grantUnlock(req, k)
		if l == nil {
			return nil, err
		}
		return l, nil
	}
	res := make(chan muxResult[K], 1)
	go func() {
		l, err := b.grantUnlock(req, k)
		res <- muxResult[K]{l, err}
	}()
	select {
	case r := <-res:
		if r.l == nil {
			return nil, r.err
		}
		if err := ctx.Err(); err != nil {
			// Granted after the caller gave up: let it go, in the
			// background, so that the caller is not kept for it.
			m.frame.Run(func() { _ = r.l.Release(context.Background()) })
			return nil, err
		}
		return r.l, nil
	case <-ctx.Done():
		m.frame.Run(func() {
			if r := <-res; r.l != nil {
				_ = r.l.Release(context.Background())
			}
		})
		return nil, ctx.Err()
	}
}

// muxResult is a try-grant's answer: the lease, or why there is none.
type muxResult[K comparable] struct {
	l   *MuxLease[K]
	err error
}

// grantUnlock runs grant, unlocks b, then finishes b if the grant found
// its connection dead, and wakes the pinger if the grant armed the
// session's idle cut-off.
func (b *muxBackend[K]) grantUnlock(req engine.Request, k K) (*MuxLease[K], error) {
	armed := b.idle == 0
	l, dead, err := b.grant(req, k)
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

// grant runs the try-grant of req on b, which the caller holds locked. On
// a failed connection it detaches b and returns what to finish once b is
// unlocked.
func (b *muxBackend[K]) grant(req engine.Request, k K) (*MuxLease[K], *muxDead[K], error) {
	idle := req.TTL
	if len(b.held) > 0 {
		idle = min(idle, b.idle)
	}
	sent := time.Now()
	a, err := b.conn.Grant(req, k, idle)
	if err != nil && a.Dead {
		return nil, b.detach(), err
	}
	// Whether or not the server granted (or failed the statement), the
	// pinger keeps a session with a cut-off alive, and puts the server's
	// own back once it holds nothing.
	b.idle = a.Cut
	b.touch(sent)
	switch {
	case err != nil:
		return nil, nil, err
	case !a.Granted:
		return nil, nil, ErrRefused
	}
	l := &MuxLease[K]{b: b, key: req.Key, mode: req.Mode, token: a.Token, lock: k, free: a.Free,
		sig: kit.NewSignal(req.OnLost)}
	if err := b.m.frame.Track(l, func() error { return nil }); err != nil {
		_ = b.conn.Undo(req, k)
		return nil, nil, err
	}
	b.held[k] = l
	b.load.Store(int32(len(b.held)))
	b.m.last.Store(int32(b.slot))
	if !req.Renew {
		l.timer = time.AfterFunc(Life(req.TTL)-time.Since(sent), l.expire)
	}
	return l, nil, nil
}

// touch records a statement sent at sent that succeeded, which moves the
// deadline of b's leases to sent + Life(idle). The caller holds b.mu.
func (b *muxBackend[K]) touch(sent time.Time) {
	if sent.After(b.validFrom) {
		b.validFrom = sent
	}
	b.arm()
}

// arm sets b's timer for the deadline of its leases, validFrom +
// Life(idle), unless it is set to fire no later. The caller holds b.mu.
func (b *muxBackend[K]) arm() {
	if b.idle == 0 {
		return
	}
	at := b.validFrom.Add(Life(b.idle))
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
func (b *muxBackend[K]) deadline() {
	b.mu.Lock()
	b.timerAt = time.Time{}
	if b.conn == nil || len(b.held) == 0 {
		b.mu.Unlock()
		return
	}
	if time.Since(b.validFrom) < Life(b.idle) {
		b.arm()
		b.mu.Unlock()
		return
	}
	b.expired()
}

// expired ends every lease of b, whose validity has run out, with
// engine.ErrLeaseLost, or engine.ErrReleasedByOperator for those that
// MuxDriver.Revoked names when this process was stopped past the
// validity. The caller holds b.mu, which expired lets go.
func (b *muxBackend[K]) expired() {
	late := time.Since(b.validFrom) - Life(b.idle)
	dead := b.detach()
	b.mu.Unlock()
	if late > stoppedAfter {
		for _, l := range b.m.drv.Revoked(dead.leases) {
			if l.timer != nil {
				l.timer.Stop()
			}
			l.sig.Close(fmt.Errorf("%w: %q", engine.ErrReleasedByOperator, l.key))
		}
	}
	dead.finish(fmt.Errorf("%w: the lease period ran out before a ping", engine.ErrLeaseLost))
}

// pinger pings b's session every third of its idle cut-off (and at least
// every MaxPing) while it holds a lease, which resets the server's idle
// clock, until b dies or the engine closes. A ping that fails, or does not
// answer within the leases' validity, ends every lease of b.
func (b *muxBackend[K]) pinger() {
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
			every := idle / 3
			if b.m.cfg.MaxPing > 0 {
				every = min(every, b.m.cfg.MaxPing)
			}
			t.Reset(max(every, time.Millisecond))
			tick = t.C
		}
		select {
		case <-b.m.frame.Closing():
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

// ping pings b's session once if it holds a lease, and ends the leases a
// force release revoked (told, then unlocked); once b holds nothing it
// puts the server's own idle cut-off back instead. It reports whether b
// is still alive.
func (b *muxBackend[K]) ping() bool {
	b.mu.Lock()
	if b.conn == nil || b.idle == 0 {
		alive := b.conn != nil
		b.mu.Unlock()
		return alive
	}
	if len(b.held) == 0 {
		// Nothing to keep alive: the session may idle again, which keeps
		// an idle engine from pinging. A lease granted later sets the
		// cut-off again.
		err := b.conn.Rest()
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
	if time.Since(b.validFrom) >= Life(b.idle) {
		b.expired() // the pinger ran late: this process was stopped
		return false
	}
	sent := time.Now()
	revoked, err := b.conn.Ping(b.validFrom.Add(Life(b.idle)), func(k K) *MuxLease[K] { return b.held[k] })
	if err == nil {
		b.touch(sent)
		b.mu.Unlock()
		for _, l := range revoked {
			l.End(engine.ErrReleasedByOperator)
		}
		return true
	}
	dead := b.detach()
	b.mu.Unlock()
	dead.finish(fmt.Errorf("%w: connection lost: %v", engine.ErrLeaseLost, err))
	return false
}

// muxDead is what is left to do for a backend taken out of service: tell
// its leases, then close its connection, which frees their locks.
type muxDead[K comparable] struct {
	m      *Mux[K]
	conn   MuxConn[K]
	leases []*MuxLease[K]
	tidy   bool // the connection works: see MuxConn.Close
}

// detach takes b out of service: no statement runs on it from then on.
// The caller holds b.mu, and calls finish on the result once it has let
// go of b.mu.
func (b *muxBackend[K]) detach() *muxDead[K] {
	d := &muxDead[K]{m: b.m, conn: b.conn}
	for _, l := range b.held {
		d.leases = append(d.leases, l)
	}
	b.conn, b.held = nil, map[K]*MuxLease[K]{}
	b.load.Store(0)
	b.timer.Stop()
	b.timerAt = time.Time{}
	return d
}

// finish ends the leases of a detached backend with err, then closes its
// connection, which ends its session and frees every lock it held.
func (d *muxDead[K]) finish(err error) {
	for _, l := range d.leases {
		if l.timer != nil {
			l.timer.Stop()
		}
		l.sig.Close(err)
		d.m.frame.Forget(l)
	}
	if d.conn != nil {
		d.conn.Close(d.tidy && len(d.leases) > 0)
	}
}

// Close ends the leases on the shared sessions with engine.ErrClosed and
// closes their connections. The engine's Close calls it once the engine's
// goroutines have stopped.
func (m *Mux[K]) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, b := range m.slots {
		if b == nil {
			continue
		}
		b.mu.Lock()
		var dead *muxDead[K]
		if b.conn != nil {
			dead = b.detach()
			dead.tidy = true
		}
		b.mu.Unlock()
		if dead != nil {
			dead.finish(engine.ErrClosed)
		}
		m.slots[i] = nil
	}
}

// Do runs fn on the live connection of slot i, under its lock, and
// reports whether there was one; for tests that look at a session.
func (m *Mux[K]) Do(i int, fn func(MuxConn[K])) bool {
	m.mu.Lock()
	b := m.slots[i]
	m.mu.Unlock()
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn == nil {
		return false
	}
	fn(b.conn)
	return true
}

// MuxLease is a session lease whose lock a shared session holds.
type MuxLease[K comparable] struct {
	b      *muxBackend[K]
	key    string
	mode   engine.Mode
	token  uint64
	lock   K
	free   time.Time // MuxAnswer.Free
	sig    *kit.Signal
	timer  *time.Timer // ends a lease without Renew when its TTL runs out
	ending bool        // under b.mu: its release has begun
}

// Key returns the lease's key.
func (l *MuxLease[K]) Key() string { return l.key }

// Mode returns the lease's mode.
func (l *MuxLease[K]) Mode() engine.Mode { return l.mode }

// Token returns the lease's fencing token.
func (l *MuxLease[K]) Token() uint64 { return l.token }

// Done is closed when the lease ends.
func (l *MuxLease[K]) Done() <-chan struct{} { return l.sig.Done() }

// Err is why the lease ended, nil while it is held.
func (l *MuxLease[K]) Err() error { return l.sig.Err() }

// Lock returns the lease's lock on its session (MuxConn's K).
func (l *MuxLease[K]) Lock() K { return l.lock }

// Free returns when the lease's lock may be freed, from its grant's
// MuxAnswer.Free: an engine whose tokens are its server's clock holds the
// lock until the clock has left the token's tick (kit.FreeAt). Zero for
// at once.
func (l *MuxLease[K]) Free() time.Time { return l.free }

// Tell ends the lease's Done with err without letting go of its lock,
// for an engine's Close, after which Mux.Close frees every lock of a
// session at once by closing it.
func (l *MuxLease[K]) Tell(err error) { l.sig.Close(err) }

// Conn returns the connection whose session holds the lease, or nil once
// the lease or its session has ended.
func (l *MuxLease[K]) Conn() MuxConn[K] {
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[l.lock] != l {
		return nil
	}
	return b.conn
}

// expire ends a lease without Renew when its validity has run out.
func (l *MuxLease[K]) expire() { l.End(engine.ErrLeaseLost) }

// claim marks l as releasing and reports whether it was held. The lease
// stays in b.held until its unlock has run.
func (l *MuxLease[K]) claim() bool {
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[l.lock] != l || l.ending {
		return false
	}
	l.ending = true
	if l.timer != nil {
		l.timer.Stop()
	}
	return true
}

// unlock runs MuxConn.Unlock of l on its backend and reports whether the
// session held the lock. On a failed connection the backend is detached
// and finished with a lost lease error, which tells its other leases.
func (l *MuxLease[K]) unlock() (held bool, err error) {
	b := l.b
	b.mu.Lock()
	if b.held[l.lock] != l || b.conn == nil {
		b.mu.Unlock()
		return false, nil // the backend died meanwhile; its close freed the lock
	}
	delete(b.held, l.lock)
	b.load.Store(int32(len(b.held)))
	b.m.last.Store(int32(b.slot))
	sent := time.Now()
	held, err = b.conn.Unlock(l)
	var dead *muxDead[K]
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

// Release releases the lease's lock on its shared session, in one
// statement. A lease that has ended returns an error wrapping
// engine.ErrNotHeld; so does one whose connection fails now (the
// connection is closed, which frees the lock, and every other lease on it
// ends with engine.ErrLeaseLost). The statement runs even if ctx is
// cancelled, bounded by the engine's op timeout.
func (l *MuxLease[K]) Release(context.Context) error {
	if !l.claim() {
		return fmt.Errorf("%w: %q (lease ended: %w)", engine.ErrNotHeld, l.key, l.sig.Err())
	}
	held, err := l.unlock()
	l.b.m.frame.Forget(l)
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

// End closes the lease with err, then releases its lock: told before the
// lock is free. It does nothing once the lease has ended.
func (l *MuxLease[K]) End(err error) {
	if !l.claim() {
		return
	}
	l.sig.Close(err)
	_, _ = l.unlock()
	l.b.m.frame.Forget(l)
}

package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/go-zookeeper/zk"
)

// session is the engine's view of its ZooKeeper session. It is guarded by
// Engine.mu.
//
// Leases are tied to an epoch: the run of one session during which the
// engine knows its nodes exist. An epoch ends, and every lease granted in it
// is lost at once, when the server reports the session expired or when the
// connection stays down for the session timeout, measured by a local timer
// from the last byte read from the server. Acquisitions that span the end of
// an epoch fail rather than grant a lease on a node that may be gone.
type session struct {
	epoch   uint64
	id      int64         // the server's session id; 0 before the first and after expiry
	up      bool          // connected with a session
	ready   chan struct{} // closed while up
	down    chan struct{} // closed when the connection drops or the session ends, until up again
	lost    chan struct{} // closed when the current epoch ends
	downGen uint64        // identifies the current disconnect's timer
	timer   *time.Timer   // loss timer while disconnected

	// orphans are nodes of this session that the engine no longer wants but
	// could not delete (the connection was down). They are deleted when the
	// same session is back; if it expires instead, the server removed them.
	orphans []orphan
}

// orphan names a node to delete: by path, or by the GUID of a create whose
// outcome is unknown.
type orphan struct {
	parent, path, guid string
	sid                int64
}

// epochState is what an acquisition remembers of the session it started in.
type epochState struct {
	epoch uint64
	sid   int64
	lost  <-chan struct{}
}

// handleEvent follows go-zookeeper's session events and counts watch
// notifications, but those of the tombstone watch (watchReleased). It does
// not block.
func (e *Engine) handleEvent(ev zk.Event) {
	switch ev.Type {
	case zk.EventSession:
	case zk.EventNotWatching:
		return
	default:
		if !e.isReleased(ev.Path) {
			e.nodeEvents.Add(1)
		}
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		e.sessionUp(e.conn.SessionID())
	case zk.StateDisconnected:
		e.sessionDown()
	case zk.StateExpired:
		e.endEpoch(fmt.Errorf("%w: zookeeper session expired", engine.ErrLeaseLost), false)
	}
}

// sessionUp records a live session. A session other than the one the
// current leases belong to ends their epoch; orphans of the same session are
// deleted now.
func (e *Engine) sessionUp(id int64) {
	e.mu.Lock()
	s := &e.sess
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	var lost []*lease
	if s.id != 0 && s.id != id {
		lost = e.takeLeasesLocked()
		s.orphans = nil
	}
	var todo []orphan
	for _, o := range s.orphans {
		if o.sid == id {
			todo = append(todo, o)
		}
	}
	s.orphans = nil
	s.id = id
	if !s.up {
		s.up = true
		close(s.ready)
		s.down = make(chan struct{})
	}
	e.mu.Unlock()
	if h := e.hooks; h != nil && h.session != nil {
		h.session(true)
	}
	e.loseAll(lost, fmt.Errorf("%w: zookeeper session replaced", engine.ErrLeaseLost))
	for _, o := range todo {
		_ = e.frame.Go(func() { e.removeOrphan(o) })
	}
}

// sessionDown starts the local session timer after a disconnect.
func (e *Engine) sessionDown() {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &e.sess
	if !s.up {
		return
	}
	s.up = false
	s.ready = make(chan struct{})
	close(s.down)
	timeout := e.sessionTimeout()
	// The server expires the session timeout after it last heard from us,
	// which was before we last heard from it; a tenth of the timeout covers
	// that round trip with room to spare.
	var heard time.Time
	if e.lastRead != nil && e.lastRead.Load() != 0 {
		heard = time.Unix(0, e.lastRead.Load())
	} else {
		heard = time.Now().Add(-timeout * 2 / 3) // go-zookeeper's read deadline
	}
	deadline := heard.Add(timeout - timeout/10)
	s.downGen++
	gen := s.downGen
	s.timer = time.AfterFunc(time.Until(deadline), func() { e.sessionTimedOut(gen) })
	if h := e.hooks; h != nil && h.session != nil {
		h.session(false)
	}
}

// sessionTimedOut ends the epoch when the session did not come back in time.
func (e *Engine) sessionTimedOut(gen uint64) {
	e.mu.Lock()
	if e.sess.up || e.sess.downGen != gen {
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	e.endEpoch(fmt.Errorf("%w: no zookeeper session for the session timeout (%v)", engine.ErrLeaseLost,
		e.sessionTimeout()), true)
}

// endEpoch loses every lease of the current epoch with err. If the session
// may still be alive on the server (mayLive), their nodes become orphans, to
// be deleted if the session comes back; otherwise the server has removed
// them and the session is forgotten.
func (e *Engine) endEpoch(err error, mayLive bool) {
	e.mu.Lock()
	lost := e.takeLeasesLocked()
	s := &e.sess
	if mayLive {
		for _, l := range lost {
			s.orphans = append(s.orphans, orphan{parent: l.parent, path: l.path, sid: l.sid})
		}
	} else {
		s.orphans = nil
		s.id = 0
		if s.up {
			s.up = false
			s.ready = make(chan struct{})
			close(s.down)
		}
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
	}
	e.mu.Unlock()
	e.loseAll(lost, err)
}

// takeLeasesLocked ends the current epoch and returns its leases. Call with
// e.mu held.
func (e *Engine) takeLeasesLocked() []*lease {
	s := &e.sess
	s.epoch++
	close(s.lost)
	s.lost = make(chan struct{})
	return e.frame.TakeLocked()
}

// loseAll ends leases with err. It runs OnLost callbacks in a goroutine of
// its own, so the event callback that got here never blocks on user code.
func (e *Engine) loseAll(lost []*lease, err error) {
	if len(lost) == 0 {
		return
	}
	go func() {
		for _, l := range lost {
			if l.markEnded() {
				l.Signal.Close(err)
			}
		}
	}()
}

// awaitSession waits until the engine has a session, for at most the
// session timeout, adds digest credentials once, and returns the epoch.
func (e *Engine) awaitSession(ctx context.Context) (epochState, error) {
	var limit *time.Timer
	defer func() {
		if limit != nil {
			limit.Stop()
		}
	}()
	for {
		e.mu.Lock()
		s := e.sess
		e.mu.Unlock()
		if s.up {
			if err := e.addAuth(ctx); err != nil {
				return epochState{}, err
			}
			return epochState{epoch: s.epoch, sid: s.id, lost: s.lost}, nil
		}
		if limit == nil {
			limit = time.NewTimer(e.sessionTimeout())
		}
		select {
		case <-s.ready:
		case <-ctx.Done():
			return epochState{}, ctx.Err()
		case <-limit.C:
			return epochState{}, fmt.Errorf("%w within the session timeout (%v)", errNoSession,
				e.sessionTimeout())
		}
	}
}

// addAuth adds the digest credentials to an own connection, once;
// go-zookeeper sends them again on every reconnect.
func (e *Engine) addAuth(ctx context.Context) error {
	if e.auth == nil || e.own == nil {
		return nil
	}
	e.authMu.Lock()
	defer e.authMu.Unlock()
	if e.authDone {
		return nil
	}
	if err := call(ctx, func() error { return e.own.AddAuth("digest", e.auth) }); err != nil {
		return err
	}
	e.authDone = true
	return nil
}

// orphan deletes a node the engine gave up, now if it can, or else when its
// session is back.
func (e *Engine) orphan(o orphan) {
	e.mu.Lock()
	s := &e.sess
	if o.sid != s.id || o.sid == 0 {
		e.mu.Unlock() // the session that owned the node is gone, and the node with it
		return
	}
	if !s.up {
		s.orphans = append(s.orphans, o)
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	_ = e.frame.Go(func() { e.removeOrphan(o) })
}

// removeOrphan deletes one orphan; if the connection fails again it goes
// back on the list.
func (e *Engine) removeOrphan(o orphan) {
	ctx, cancel := context.WithTimeout(e.frame.Context(), e.sessionTimeout())
	defer cancel()
	path := o.path
	if path == "" {
		p, found, err := e.findGUID(ctx, o.parent, o.guid)
		if err != nil {
			if connErr(err) {
				e.orphan(o)
			}
			return
		}
		if !found {
			return
		}
		path = p
	}
	err := e.removeNode(ctx, path)
	if err != nil && connErr(err) && !errors.Is(err, zk.ErrSessionExpired) {
		o.path = path
		e.orphan(o)
	}
}

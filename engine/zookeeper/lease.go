package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
	"github.com/go-zookeeper/zk"
)

// Lease states.
const (
	held = iota
	releasing
	ended
)

// lease is a granted queue node.
type lease struct {
	kit.LeaseCore // Token is the czxid of the lease's queue node
	eng           *Engine
	path          string // the queue node
	parent        string // the key's lock node
	sid           int64  // the session that owns the node

	mu      sync.Mutex
	state   int
	expired bool        // the TTL ran out during a release
	timer   *time.Timer // fixed-TTL expiry; nil with Renew
}

// Release deletes the lease's queue node. The node's name is unique to this
// lease, so the delete cannot touch another holder's lock. It returns an
// error wrapping engine.ErrNotHeld if the lease has ended or its node is
// gone. If the server cannot be reached (or ctx ends) before it answers,
// Release returns an *engine.OpError, wrapping engine.ErrUnavailable or,
// when ctx ended first, ctx.Err(), and ends the lease with
// engine.ErrLeaseLost: the delete may yet happen, so the lease can no
// longer be said to hold; the engine deletes the node when its session is
// back. Other server errors leave the lease held.
func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return l.notHeld()
	}
	l.state = releasing
	l.mu.Unlock()

	e := l.eng
	bctx, cancel := e.bound(ctx)
	defer cancel()
	var err error
	if l.Mode() == engine.Exclusive {
		err = e.releaseNode(bctx, l.path)
	} else {
		err = e.removeNode(bctx, l.path)
	}
	switch {
	case err == nil:
		l.finish(engine.ErrReleased)
		return nil
	case errors.Is(err, zk.ErrNoNode):
		l.finish(fmt.Errorf("%w: zookeeper lock node %s is gone", engine.ErrLeaseLost, l.path))
		return l.notHeld()
	case connErr(err) || bctx.Err() != nil:
		l.finish(fmt.Errorf("%w: release of %s did not complete: %w", engine.ErrLeaseLost, l.path, err))
		e.orphan(orphan{parent: l.parent, path: l.path, sid: l.sid})
		return e.opError(ctx, "release", l.Key(), err)
	}
	l.mu.Lock()
	expired := l.expired
	if l.state == releasing {
		l.state = held
	}
	l.mu.Unlock()
	if expired {
		l.expire()
	}
	return e.opError(ctx, "release", l.Key(), err)
}

func (l *lease) notHeld() error {
	l.Signal.Close(fmt.Errorf("%w: released while not held", engine.ErrLeaseLost))
	return l.Signal.NotHeld(l.Key())
}

// expire ends a fixed-TTL lease when its timer fires and deletes its node.
func (l *lease) expire() {
	l.mu.Lock()
	switch l.state {
	case ended:
		l.mu.Unlock()
		return
	case releasing:
		l.expired = true
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	if !l.finish(fmt.Errorf("%w: fixed TTL ran out", engine.ErrLeaseLost)) {
		return
	}
	_ = l.eng.frame.Go(func() { l.eng.dropNode(l.path, l.parent, l.sid) })
}

// drop gives up a lease its caller never received: it ends silently and
// its node is deleted.
func (l *lease) drop() {
	if l.markEnded() {
		e := l.eng
		e.frame.Forget(l)
		e.dropNode(l.path, l.parent, l.sid)
	}
}

// finish ends the lease with err, forgets it and reports whether this call
// ended it.
func (l *lease) finish(err error) bool {
	if !l.markEnded() {
		if errors.Is(err, engine.ErrReleased) {
			// Lost while the release was in flight; the node is gone
			// either way.
			l.Signal.Close(err)
		}
		return false
	}
	l.eng.frame.Forget(l)
	l.Signal.Close(err)
	return true
}

// markEnded moves the lease to its final state and stops its timer. It
// reports whether the lease had not ended before.
func (l *lease) markEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == ended {
		return false
	}
	l.state = ended
	if l.timer != nil {
		l.timer.Stop()
	}
	return true
}

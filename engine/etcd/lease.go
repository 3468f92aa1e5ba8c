package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// Lease states.
const (
	held = iota
	releasing
	ended
)

// lease is a granted queue entry.
type lease struct {
	kit.LeaseCore // Token is the create revision of the lease's queue entry
	eng           *Engine
	name          string // the queue entry
	slot          uint64 // the slot in its name
	ep            *epoch // the etcd lease the entry is attached to

	mu      sync.Mutex
	state   int
	expired bool        // the TTL ran out during a release
	timer   *time.Timer // fixed-TTL expiry; nil with Renew
}

// Release deletes the lease's queue entry. Its name holds the engine's
// etcd lease id and a slot that no other entry of the engine gets until
// this one is known to be gone, and Release sends nothing once the lease
// has ended, so the delete can only remove this lease's own entry: a
// compare-and-delete on ownership for the price of a plain delete, and
// etcd's count of deleted keys says whether the lease still held. It returns an error wrapping
// engine.ErrNotHeld if the lease has ended or its entry is gone. If the
// server does not answer (or ctx ends) first, Release returns an
// *engine.OpError, wrapping engine.ErrUnavailable or, when ctx ended
// first, ctx.Err(), and ends the lease with engine.ErrLeaseLost: the delete
// may yet happen, so the lease can no longer be said to hold; the engine
// deletes the entry in the background, or it goes with the etcd lease.
// Other server errors leave the lease held.
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
	resp, err := e.c().Delete(bctx, l.name)
	switch {
	case err == nil && resp.Deleted == 1:
		l.ep.give(l.slot)
		l.finish(engine.ErrReleased)
		return nil
	case err == nil:
		l.ep.give(l.slot)
		lost := fmt.Errorf("%w: etcd queue entry %q is gone", engine.ErrLeaseLost, l.name)
		if e.releasedMark(bctx, l) {
			lost = fmt.Errorf("%w: etcd queue entry %q was deleted", engine.ErrReleasedByOperator, l.name)
		}
		l.finish(lost)
		return l.notHeld()
	case down(err) || bctx.Err() != nil:
		l.finish(fmt.Errorf("%w: release of %q did not complete: %w", engine.ErrLeaseLost, l.name, err))
		e.frame.Run(func() { e.deleteEntry(l.ep, l.name, int64(l.Token()), l.slot) })
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

func (l *lease) notHeld() error { return l.Signal.NotHeld(l.Key()) }

// expire ends a fixed-TTL lease when its timer fires and deletes its entry.
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
	if l.finish(fmt.Errorf("%w: fixed TTL ran out", engine.ErrLeaseLost)) {
		l.eng.frame.Run(func() { l.eng.deleteEntry(l.ep, l.name, int64(l.Token()), l.slot) })
	}
}

// finish ends the lease with err, forgets it and reports whether this call
// ended it.
func (l *lease) finish(err error) bool {
	if !l.markEnded() {
		if errors.Is(err, engine.ErrReleased) {
			l.Signal.Close(err) // lost while the release was in flight; the entry is gone either way
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

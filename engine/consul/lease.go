package consul

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// lease is a Consul engine lease.
type lease struct {
	kit.LeaseCore // Token is the fencing token (see fenceOps)
	e             *Engine
	sess          *session // the session that backs the lease; set during Acquire
	id            string   // unique lease id, recorded in the key's value
	dir           string   // P/E/
	doc           string   // P/E/lock

	limit int    // Request.Limit: counted shared when above 0
	value string // Request.Value, stored in the lock document

	index uint64 // ModifyIndex of the granting write, for a release's check

	mu    sync.Mutex
	ended bool // claimed by Release, expiry, loss or Close
	// queued: a fair-mode waiter key exists for l (Acquire only, not
	// guarded by mu); next to ended, where it takes no room of its own.
	queued bool
	timer  *time.Timer // fixed-TTL expiry; nil for renewed leases
}

// claim makes the caller the one that ends the lease; it reports false if
// someone else already is.
func (l *lease) claim() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return false
	}
	l.ended = true
	return true
}

// unclaim gives the lease back after a release that could not reach the
// server, so that the caller may retry.
func (l *lease) unclaim() {
	l.mu.Lock()
	l.ended = false
	l.mu.Unlock()
}

// finish forgets the lease and closes its signal with err. Call it after a
// successful claim.
func (l *lease) finish(err error) {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.e.frame.Forget(l)
	if s := l.sess; s != nil {
		s.mu.Lock()
		delete(s.leases, l)
		s.mu.Unlock()
	}
	l.Signal.Close(err)
}

// Release deletes the key's lock (exclusive) or this holder's entry
// (shared) with a check-and-set on what the grant wrote, so a stale lease
// changes nothing. It returns engine.ErrNotHeld if the lease had ended or no
// longer held the key, and an *engine.OpError if the server could not be
// reached; the lease then stays held and Release may be called again.
func (l *lease) Release(ctx context.Context) error {
	if !l.claim() {
		return fmt.Errorf("%w: %q (lease ended: %w)", engine.ErrNotHeld, l.Key(), l.Signal.Err())
	}
	held, err := l.releaseOnServer(ctx)
	if err != nil {
		l.unclaim()
		return l.e.opErr(ctx, "release", l.Key(), err)
	}
	if !held {
		l.finish(engine.ErrLeaseLost)
		return fmt.Errorf("%w: %q (lease ended: %w)", engine.ErrNotHeld, l.Key(), l.Signal.Err())
	}
	l.finish(engine.ErrReleased)
	return nil
}

// expire ends a fixed-TTL lease when its timer fires: Done closes with
// engine.ErrLeaseLost at once, whatever the server's state, and then the
// key is given up on the server. If the server cannot be reached the
// session retries the release in the background. Close waits for these
// releases, so that destroying the session does not leave a lock-delay on
// an expired key.
func (l *lease) expire() {
	e := l.e
	e.mu.Lock()
	if e.frame.ClosedLocked() || !l.claim() {
		e.mu.Unlock()
		return // Close (or a release) ends the lease
	}
	e.expiring.Add(1)
	e.mu.Unlock()
	defer e.expiring.Done()
	l.finish(fmt.Errorf("%w: fixed TTL ran out", engine.ErrLeaseLost))
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, err := l.releaseOnServer(ctx); err != nil {
		l.sess.addOrphan(l)
	}
}

// releaseOnServer gives up what the grant wrote and reports whether the
// lease still held it.
func (l *lease) releaseOnServer(ctx context.Context) (bool, error) {
	if l.Mode() == engine.Exclusive {
		return l.e.releaseExclusive(ctx, l)
	}
	return l.e.releaseShared(ctx, l)
}

// takeBack removes anything on the server that carries l's id, whether or
// not l was ever granted: the cleanup after an abandoned Acquire.
func (l *lease) takeBack(ctx context.Context) error {
	if l.queued {
		if _, _, _, err := l.e.txn(ctx,
			api.KVTxnOps{{Verb: api.KVDelete, Key: waiterKey(l)}}); err != nil {
			return err
		}
		l.queued = false
		// The last waiter to leave takes the queue marker with it.
		st, err := l.e.read(ctx, l.dir, 0)
		if err != nil {
			return err
		}
		if err := l.e.clearQueue(ctx, l, st); err != nil {
			return err
		}
	}
	if l.Mode() == engine.Exclusive {
		return l.e.takeBackExclusive(ctx, l)
	}
	_, err := l.e.releaseShared(ctx, l)
	return err
}

// ordered reports whether l waits in strict arrival order behind every
// earlier waiter: a writer, or a counted reader (a permit is a slot any
// earlier waiter may need).
func (l *lease) ordered() bool { return l.Mode() == engine.Exclusive || l.limit > 0 }

package consul

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
)

// outcome is the result of one attempt at a transaction.
type outcome int

const (
	granted     outcome = iota // the transaction went through
	held                       // someone else holds the key
	delayed                    // Consul refused a lock because of a lock-delay
	conflict                   // the key changed since it was read: read again
	sessionGone                // Consul no longer knows the engine's session
	queueing                   // waiters queue for the key: join them or give up
)

// Attempts per Acquire: a waiting Acquire is bounded by its context and by
// the engine's Close; the counts are backstops.
const (
	tryAttempts  = 8
	waitAttempts = 1 << 20
	minBackoff   = 10 * time.Millisecond
	maxBackoff   = time.Second
)

// acquire takes the key for l, waiting if req.Wait. On success the token (SetToken) and
// l.sess are set.
func (e *Engine) acquire(ctx context.Context, l *lease, req engine.Request) error {
	if e.cfg.fair {
		if req.Wait {
			return e.acquireFair(ctx, l)
		}
		// A single attempt does not jump the queue.
		if err := e.refuseIfQueued(ctx, l); err != nil {
			return err
		}
	}
	a := &acquisition{e: e, l: l, wait: req.Wait, backoff: backoff{minBackoff}}
	defer a.leaveTurn()
	attempts := tryAttempts
	if req.Wait {
		attempts = waitAttempts
	}
	for range attempts {
		if done, err := a.attempt(ctx); done {
			return err
		}
	}
	return e.opErr(ctx, "acquire", l.Key(), fmt.Errorf("gave up after %d attempts", attempts))
}

// refuseIfQueued returns ErrNotAcquired when waiters queue for l's key.
func (e *Engine) refuseIfQueued(ctx context.Context, l *lease) error {
	st, err := e.read(ctx, l.dir, 0)
	if err != nil {
		return e.opErr(ctx, "acquire", l.Key(), err)
	}
	if st.ahead(l, 0) {
		return fmt.Errorf("%w: %q has waiters", engine.ErrNotAcquired, l.Key())
	}
	return nil
}

// acquisition is one Acquire outside fair mode, from attempt to attempt:
// what it last read of the key, whether it has the key's turn, since when
// it has been refused, and how long it backs off.
type acquisition struct {
	e    *Engine
	l    *lease
	wait bool // req.Wait

	st        *state    // the key as last read, for the next attempt; nil: none
	turnDone  func()    // set once this waiter has the key's turn
	waitSince time.Time // the first refusal
	backoff
}

// attempt makes one try for the key and, when refused, waits as the
// refusal asks. done is true when acquire should return err.
func (a *acquisition) attempt(ctx context.Context) (done bool, err error) {
	s, err := a.e.session(ctx)
	if err != nil {
		return true, err
	}
	a.l.sess = s
	out, err := a.try(ctx)
	if err != nil {
		return true, a.e.opErr(ctx, "acquire", a.l.Key(), err)
	}
	switch out {
	case granted:
		return true, nil
	case sessionGone:
		s.lose("invalidated")
		return false, nil
	case conflict:
		return false, nil
	case queueing:
		return a.queueing(ctx)
	}
	return a.refused(ctx, s, out) // held or delayed
}

// try is one transaction for the key, with the state last read (a shared
// request uses it), which it then forgets.
func (a *acquisition) try(ctx context.Context) (outcome, error) {
	st := a.st
	a.st = nil
	if a.l.Mode() == engine.Exclusive {
		return a.e.tryExclusive(ctx, a.l, st)
	}
	return a.e.tryShared(ctx, a.l, st)
}

// queueing handles a refusal because waiters queue for the key: a single
// attempt gives up; a waiting one joins the queue when a slot is free, and
// otherwise polls until it drains.
func (a *acquisition) queueing(ctx context.Context) (done bool, err error) {
	e, l := a.e, a.l
	st, err := e.read(ctx, l.dir, 0)
	if err != nil {
		return true, e.opErr(ctx, "acquire", l.Key(), err)
	}
	if len(st.waiters) == 0 {
		// The marker outlived its queue: clear it and try again.
		if err := e.clearQueue(ctx, l, st); err != nil {
			return true, e.opErr(ctx, "acquire", l.Key(), err)
		}
		return false, nil
	}
	if !a.wait {
		return true, fmt.Errorf("%w: %q has waiters", engine.ErrNotAcquired, l.Key())
	}
	if done, err := a.queue(ctx); done {
		return true, err
	}
	// Every queue slot is taken: poll, one waiter per key and engine,
	// until the queue drains or a slot comes free.
	if a.turnDone == nil {
		err = a.takeTurn(ctx)
	} else {
		err = a.pause(ctx)
	}
	return err != nil, err
}

// refused handles a refusal because the key is held or in its lock-delay:
// it prunes dead holders, gives up for a single attempt, and otherwise
// waits for the key to change.
func (a *acquisition) refused(ctx context.Context, s *session, out outcome) (done bool, err error) {
	e, l := a.e, a.l
	st, err := e.read(ctx, l.dir, 0)
	if err != nil {
		return true, e.opErr(ctx, "acquire", l.Key(), err)
	}
	if l.Mode() == engine.Exclusive && st.prunable() {
		pout, err := e.prune(ctx, l, st)
		if err != nil {
			return true, e.opErr(ctx, "acquire", l.Key(), err)
		}
		switch pout {
		case granted, conflict:
			return false, nil
		case sessionGone:
			s.lose("invalidated")
			return false, nil
		}
		out = delayed
	}
	if !blocks(st, l) && out == held {
		a.st = st
		return false, nil // freed in between: try again at once
	}
	if !a.wait {
		if out == delayed {
			return true, fmt.Errorf("%w: %q is in its lock-delay", engine.ErrNotAcquired, l.Key())
		}
		return true, fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, l.Key())
	}
	return a.await(ctx, st, out)
}

// await is a waiting request's wait after a refusal: after long enough
// (see WithStarvation) it joins the queue; first it takes the key's turn;
// in a lock-delay it backs off; otherwise it blocks until the key changes.
func (a *acquisition) await(ctx context.Context, st *state, out outcome) (done bool, err error) {
	e, l := a.e, a.l
	if a.waitSince.IsZero() {
		a.waitSince = time.Now()
	} else if e.cfg.starve > 0 && l.ordered() &&
		time.Since(a.waitSince) >= e.cfg.starve {
		// Starving: from here on, arrival order (see WithStarvation).
		if done, err := a.queue(ctx); done {
			return true, err
		}
	}
	if a.turnDone == nil {
		err := a.takeTurn(ctx)
		return err != nil, err // else try at once: the key may have come free meanwhile
	}
	if out == delayed && (!blocks(st, l) || l.Mode() == engine.Exclusive && st.prunable()) {
		err := a.pause(ctx)
		return err != nil, err
	}
	if a.st, err = e.waitChange(ctx, l, st); err != nil {
		return true, e.opErr(ctx, "acquire", l.Key(), err)
	}
	return false, nil
}

// takeTurn waits for the key's turn in this engine: one waiter per key and
// engine holds a blocking query open (or polls); the others queue here
// (see kit.Turns). Without it, a process with hundreds of waiters runs
// into the agent's per-client connection limit.
func (a *acquisition) takeTurn(ctx context.Context) error {
	_, done, err := a.e.turns.Take(ctx, a.l.Key(), nil)
	a.turnDone = done
	return err
}

// leaveTurn gives up the key's turn, if this waiter has it.
func (a *acquisition) leaveTurn() {
	if a.turnDone != nil {
		a.turnDone()
		a.turnDone = nil
	}
}

// queue hands the wait over to the key's queue, giving up the turn first:
// queued waiters each watch their own key. It does so only if one of the
// engine's queue slots is free (done false otherwise), so that queued
// waiters' blocking queries leave connections for others.
func (a *acquisition) queue(ctx context.Context) (done bool, err error) {
	select {
	case a.e.queueSlots <- struct{}{}:
	default:
		return false, nil
	}
	defer func() { <-a.e.queueSlots }()
	a.leaveTurn()
	return true, a.e.acquireFair(ctx, a.l)
}

// backoff is a pause that doubles after each use, up to maxBackoff.
type backoff struct{ d time.Duration }

// pause sleeps for the backoff, or until ctx ends, then doubles it.
func (b *backoff) pause(ctx context.Context) error {
	if err := sleep(ctx, b.d); err != nil {
		return err
	}
	b.d = min(2*b.d, maxBackoff)
	return nil
}

// blocks reports whether st keeps l out: any document keeps a writer out;
// a writer, or for a counted reader l.limit live holders, keep a reader
// out.
func blocks(st *state, l *lease) bool {
	if l.Mode() == engine.Exclusive {
		return st.doc != nil
	}
	return st.writerHeld() || st.full(l.limit)
}

// waitChange blocks on the key's folder until the state no longer blocks
// l, or one recheck (WithRecheck) passes without a change (then the caller checks
// again anyway, so a missed notification costs a delay, never a hang).
func (e *Engine) waitChange(ctx context.Context, l *lease, st *state) (*state, error) {
	for range 64 {
		index := max(st.index, 1)
		next, err := e.read(ctx, l.dir, index)
		if err != nil {
			return nil, err
		}
		if next.index == st.index || !blocks(next, l) ||
			(l.Mode() == engine.Exclusive && next.prunable()) {
			return next, nil
		}
		if next.index < st.index {
			next.index = 0 // went backwards: the next read starts over
		}
		st = next
	}
	return st, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// txn runs a KV transaction. ok is false when a check or lock failed; then
// out says how.
func (e *Engine) txn(ctx context.Context,
	ops api.KVTxnOps) (ok bool, resp *api.KVTxnResponse, out outcome, err error) {
	ok, resp, _, err = e.kv.Txn(ops, e.query(ctx))
	if err != nil {
		return false, nil, 0, err
	}
	if ok {
		return true, resp, granted, nil
	}
	if resp == nil || len(resp.Errors) == 0 {
		return false, resp, conflict, nil
	}
	if what := resp.Errors[0].What; refusedByACL(what) {
		// Not a conflict to retry at once: the token lacks a permission,
		// and every retry would be refused the same way.
		return false, resp, 0, fmt.Errorf("transaction refused: %s", what)
	}
	return false, resp, classify(resp.Errors[0].What), nil
}

// refusedByACL reports whether a transaction error is an ACL refusal.
func refusedByACL(what string) bool {
	return strings.Contains(what, "Permission denied") || strings.Contains(what, "ACL not found")
}

// classify maps a transaction error text to an outcome.
func classify(what string) outcome {
	switch {
	case strings.Contains(what, "lock delay"):
		return delayed
	case strings.Contains(what, "invalid session"), strings.Contains(what, "missing session"):
		return sessionGone
	}
	return conflict
}

// failedOp returns the index of the first failed operation, or -1.
func failedOp(resp *api.KVTxnResponse) int {
	if resp == nil || len(resp.Errors) == 0 {
		return -1
	}
	return resp.Errors[0].OpIndex
}

// indexOf returns the highest ModifyIndex the transaction results report
// for key.
func indexOf(resp *api.KVTxnResponse, key string) (uint64, error) {
	var idx uint64
	for _, r := range resp.Results {
		if r != nil && r.Key == key && r.ModifyIndex > idx {
			idx = r.ModifyIndex
		}
	}
	if idx == 0 {
		return 0, errors.New("transaction result has no index for " + key)
	}
	return idx, nil
}

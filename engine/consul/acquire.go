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

// acquire takes the key for l, waiting if req.Wait. On success l.token and
// l.sess are set.
func (e *Engine) acquire(ctx context.Context, l *lease, req engine.Request) error {
	if e.cfg.fair {
		if req.Wait {
			return e.acquireFair(ctx, l)
		}
		// A single attempt does not jump the queue.
		st, err := e.read(ctx, l.dir, 0)
		if err != nil {
			return e.opErr(ctx, "acquire", l.key, err)
		}
		if st.ahead(l.mode, l.id, 0) {
			return fmt.Errorf("%w: %q has waiters", engine.ErrNotAcquired, l.key)
		}
	}
	var st *state
	var turnDone func() // set once this waiter has the key's turn
	defer func() {
		if turnDone != nil {
			turnDone()
		}
	}()
	// takeTurn waits for the key's turn in this engine: one waiter per key
	// and engine holds a blocking query open (or polls); the others queue
	// here (see engine.Turns). Without it, a process with hundreds of
	// waiters runs into the agent's per-client connection limit.
	takeTurn := func() error {
		_, done, err := e.turns.Take(ctx, l.key, nil)
		turnDone = done
		return err
	}
	// queue hands the wait over to the key's queue, giving up the turn
	// first: queued waiters each watch their own key. It does so only if
	// one of the engine's queue slots is free (done false otherwise), so
	// that queued waiters' blocking queries leave connections for others.
	queue := func() (done bool, err error) {
		select {
		case e.queueSlots <- struct{}{}:
		default:
			return false, nil
		}
		defer func() { <-e.queueSlots }()
		if turnDone != nil {
			turnDone()
			turnDone = nil
		}
		return true, e.acquireFair(ctx, l)
	}
	var waitSince time.Time // the first refusal
	backoff := minBackoff
	attempts := tryAttempts
	if req.Wait {
		attempts = waitAttempts
	}
	for range attempts {
		s, err := e.session(ctx)
		if err != nil {
			return err
		}
		l.sess = s
		var out outcome
		if l.mode == engine.Exclusive {
			out, err = e.tryExclusive(ctx, l, nil)
		} else {
			out, err = e.tryShared(ctx, l, st)
		}
		st = nil
		if err != nil {
			return e.opErr(ctx, "acquire", l.key, err)
		}
		switch out {
		case granted:
			return nil
		case sessionGone:
			s.lose("invalidated")
			continue
		case conflict:
			continue
		case queueing:
			if st, err = e.read(ctx, l.dir, 0); err != nil {
				return e.opErr(ctx, "acquire", l.key, err)
			}
			if len(st.waiters) == 0 {
				// The marker outlived its queue: clear it and try again.
				if err := e.clearQueue(ctx, l, st); err != nil {
					return e.opErr(ctx, "acquire", l.key, err)
				}
				st = nil
				continue
			}
			if !req.Wait {
				return fmt.Errorf("%w: %q has waiters", engine.ErrNotAcquired, l.key)
			}
			if done, err := queue(); done {
				return err
			}
			// Every queue slot is taken: poll, one waiter per key and
			// engine, until the queue drains or a slot comes free.
			if turnDone == nil {
				if err := takeTurn(); err != nil {
					return err
				}
			} else {
				if err := sleep(ctx, backoff); err != nil {
					return err
				}
				backoff = min(2*backoff, maxBackoff)
			}
			st = nil
			continue
		}
		// Held or delayed: look at the key.
		if st, err = e.read(ctx, l.dir, 0); err != nil {
			return e.opErr(ctx, "acquire", l.key, err)
		}
		if l.mode == engine.Exclusive && st.prunable() {
			pout, err := e.prune(ctx, l, st)
			if err != nil {
				return e.opErr(ctx, "acquire", l.key, err)
			}
			switch pout {
			case granted, conflict:
				st = nil
				continue
			case sessionGone:
				s.lose("invalidated")
				st = nil
				continue
			}
			out = delayed
		}
		if !blocks(st, l.mode) && out == held {
			continue // freed in between: try again at once
		}
		if !req.Wait {
			if out == delayed {
				return fmt.Errorf("%w: %q is in its lock-delay", engine.ErrNotAcquired, l.key)
			}
			return fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, l.key)
		}
		if waitSince.IsZero() {
			waitSince = time.Now()
		} else if e.cfg.starve > 0 && l.mode == engine.Exclusive && time.Since(waitSince) >= e.cfg.starve {
			// Starving: from here on, arrival order (see WithStarvation).
			if done, err := queue(); done {
				return err
			}
		}
		if turnDone == nil {
			if err := takeTurn(); err != nil {
				return err
			}
			st = nil
			continue // try at once: the key may have come free meanwhile
		}
		if out == delayed && (!blocks(st, l.mode) || l.mode == engine.Exclusive && st.prunable()) {
			if err := sleep(ctx, backoff); err != nil {
				return err
			}
			backoff = min(2*backoff, maxBackoff)
			st = nil
			continue
		}
		if st, err = e.waitChange(ctx, l, st); err != nil {
			return e.opErr(ctx, "acquire", l.key, err)
		}
	}
	return e.opErr(ctx, "acquire", l.key, fmt.Errorf("gave up after %d attempts", attempts))
}

// blocks reports whether st keeps a request in mode out.
func blocks(st *state, mode engine.Mode) bool {
	if mode == engine.Exclusive {
		return st.doc != nil
	}
	return st.writerHeld()
}

// waitChange blocks on the key's folder until the state no longer blocks
// l, or one wait time passes without a change (then the caller checks
// again anyway, so a missed notification costs a delay, never a hang).
func (e *Engine) waitChange(ctx context.Context, l *lease, st *state) (*state, error) {
	for range 64 {
		index := max(st.index, 1)
		next, err := e.read(ctx, l.dir, index)
		if err != nil {
			return nil, err
		}
		if next.index == st.index || !blocks(next, l.mode) || (l.mode == engine.Exclusive && next.prunable()) {
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
func (e *Engine) txn(ctx context.Context, ops api.KVTxnOps) (ok bool, resp *api.KVTxnResponse, out outcome, err error) {
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

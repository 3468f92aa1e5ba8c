package sqlcore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// lease is a lease-strategy lease: the key's row (exclusive) or a reader
// row (shared) that names this lease's owner value until it is cleared or
// expires on the server's clock.
type lease struct {
	kit.LeaseCore
	c     *Core
	owner string
	ttl   time.Duration
	renew bool

	mu        sync.Mutex
	timer     *time.Timer // fixed-TTL expiry; nil with Renew
	releasing bool        // a Release is on the wire: renewal leaves it alone
	// validFrom is a local monotonic instant no later than the server's
	// clock (MySQL's NOW(6), PostgreSQL's now()) in the last grant or
	// successful renewal: the lease is surely held until validFrom+ttl,
	// measured by elapsed time only.
	validFrom time.Time
}

// life is how long after sending a grant or renewal a lease counts as
// held: its TTL less engine.Margin, so that Done closes ahead of the
// server's expiry even when this process's timers run late.
func life(ttl time.Duration) time.Duration { return ttl - engine.Margin(ttl) }

// maxTransient is how many transient failures (Dialect.Transient) in a row
// one acquisition repeats before it returns the error.
const maxTransient = 5

// AcquireLease grants req with the lease strategy, within a call the
// engine entered in its frame. It makes grant attempts until one succeeds,
// the request does not wait, or ctx ends. After its first refusal a
// waiter takes a ticket in the key's queue, and the grants go in ticket
// order across processes (see queue). An attempt whose outcome is unknown
// (its statement failed in flight, or ctx ended during it) is undone in
// the background, and so is the ticket of a wait that ends without a
// grant, so a grant or ticket the server made is never left behind and
// the caller never waits past ctx for the clean-up. While renewal falls
// behind (kit.Pace) it refuses with an OpError wrapping
// engine.ErrUnavailable.
func (c *Core) AcquireLease(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := c.pace.Err(); err != nil {
		return nil, &engine.OpError{Engine: c.cfg.Name, Op: "acquire", Key: req.Key, Err: err}
	}
	owner := c.Owner()
	w := &waiter{ahead: -1}
	transients := 0
	failed := func(err error) (engine.Lease, error) {
		if ctx.Err() != nil {
			return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
		}
		return nil, c.d.OpErr(ctx, "acquire", req.Key, err)
	}
	for {
		if w.tries() {
			start := time.Now()
			token, ok, err := c.grantOnce(ctx, req, owner, &w.a)
			if err == nil {
				transients = 0 // "in a row": a clean answer ends the run
			}
			switch {
			case err != nil && c.d.Transient(err) && transients < maxTransient:
				transients++
			case err != nil:
				c.leave(req, owner, w, true)
				return failed(err)
			case ok:
				w.a.Ticket = 0 // the grant deleted it
				c.leave(req, owner, w, false)
				return c.grantInTime(req, owner, token, start)
			}
		}
		if !req.Wait {
			return nil, fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key)
		}
		delay, err := c.queue(ctx, req, owner, w)
		if err == nil {
			transients = 0
		}
		switch {
		case err != nil && c.d.Transient(err) && transients < maxTransient:
			transients++
			delay = c.cfg.MinBackoff
		case err != nil:
			c.leave(req, owner, w, false)
			return failed(err)
		}
		if err := c.pause(ctx, req.Key, w, delay); err != nil {
			c.leave(req, owner, w, false)
			return nil, err
		}
	}
}

// leave takes a waiter out of the engine's lineup and, in the background
// (bounded by kit.UndoWait for the caller), deletes its tickets if it
// may have one (its own, or one an Enqueue that failed may have made) and,
// with undo, clears a grant whose outcome is unknown.
func (c *Core) leave(req engine.Request, owner string, w *waiter, undo bool) {
	if w.spot != nil {
		c.line.leave(req.Key, w.spot)
		w.spot = nil
	}
	queued := w.a.Ticket != 0 || w.orphan
	w.a.Ticket, w.orphan = 0, false
	if !queued && !undo {
		return
	}
	c.Frame.RunUpTo(kit.UndoWait, func() {
		ctx, cancel := c.OpCtx()
		defer cancel()
		if undo {
			c.d.Undo(ctx, req, owner)
		}
		if queued {
			c.d.Dequeue(ctx, req.Key, owner)
		}
	})
}

// pause waits delay before the next step if the waiter is the first of
// the engine's waiters on key (or has no place in the line); at the head
// of the queue it then backs off (see headBackoff). Otherwise it waits until it
// is first, and returns at once then: the first one's refreshes keep its
// ticket alive meanwhile. Should those be late, it returns to look at its
// own ticket, so that a waiter whose first one is stuck never hangs.
func (c *Core) pause(ctx context.Context, key string, w *waiter, delay time.Duration) error {
	t := time.NewTimer(c.ticketTTL())
	defer t.Stop()
	for waited := false; ; waited = true {
		first, changed := true, (<-chan struct{})(nil)
		if w.spot != nil {
			first, changed = c.line.first(key, w.spot)
		}
		if first && waited {
			return nil // first just now: its delay is stale, look at once
		}
		if first {
			b := c.backoff()
			if w.a.Ticket != 0 && w.ahead == 0 {
				b = c.headBackoff()
			}
			next, err := b.Pause(ctx, c.Frame.Closing(), changed, delay)
			if w.a.Ticket != 0 && w.ahead == 0 {
				w.headTries++
				w.backoff = max(next, b.Min)
				if w.headTries < headSteady {
					w.backoff = b.Min
				}
			}
			return err
		}
		select {
		case <-changed:
		case <-t.C:
			if time.Since(c.line.refreshed(key)) >= c.ticketTTL()/2 {
				return nil // the first one's refreshes are late: look
			}
			t.Reset(c.ticketTTL() / 3)
		case <-ctx.Done():
			return errors.Join(engine.ErrNotAcquired, ctx.Err())
		case <-c.Frame.Closing():
			return engine.ErrClosed
		}
	}
}

// grantOnce makes one attempt, bounded by ctx and the op timeout.
func (c *Core) grantOnce(ctx context.Context, req engine.Request, owner string,
	a *Attempt) (uint64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	return c.d.Grant(ctx, req, owner, a)
}

// grantInTime makes the lease of a grant the server made for a request
// sent at start, unless the answer came after the lease's TTL had run out
// (the process was stopped, or the network held it): the row may be
// someone else's by now.
func (c *Core) grantInTime(req engine.Request, owner string, token uint64,
	start time.Time) (engine.Lease, error) {
	if time.Since(start) >= life(req.TTL) {
		c.Frame.RunUpTo(kit.UndoWait, func() { c.undo(req, owner) })
		return nil, fmt.Errorf("%w: %q: the grant arrived after its %v TTL had run out",
			engine.ErrNotAcquired, req.Key, req.TTL)
	}
	return c.granted(req, owner, token, start)
}

// backoff is the engine's wait between grant attempts.
func (c *Core) backoff() kit.Backoff {
	return kit.Backoff{Min: c.cfg.MinBackoff, Max: c.cfg.MaxBackoff}
}

// undo clears a grant whose outcome is unknown because its statement
// failed in flight. The owner value is this attempt's alone, so clearing it
// cannot touch anyone else's lease. Best effort.
func (c *Core) undo(req engine.Request, owner string) {
	ctx, cancel := c.OpCtx()
	defer cancel()
	c.d.Undo(ctx, req, owner)
}

// granted registers a new lease, or gives it back if the engine closed
// meanwhile. start was taken before the grant was sent, so it is no later
// than the server's clock in the grant's statements.
func (c *Core) granted(req engine.Request, owner string, token uint64,
	start time.Time) (engine.Lease, error) {
	l := &lease{
		LeaseCore: kit.NewLeaseCore(req.Key, req.Mode, req.OnLost), c: c, owner: owner,
		ttl: req.TTL, renew: req.Renew, validFrom: start,
	}
	l.SetToken(token)
	if err := c.Frame.Track(l, func() error {
		if !req.Renew {
			// The server expires the row at its clock plus the TTL;
			// this timer, started before the statement was sent, fires
			// a margin before that.
			l.mu.Lock()
			l.timer = time.AfterFunc(life(req.TTL)-time.Since(start),
				func() { l.end(engine.ErrLeaseLost, false) })
			l.mu.Unlock()
		} else {
			if c.every == 0 || req.TTL/3 < c.every {
				c.every = req.TTL / 3
			}
			// Its first renewal is due a third of its TTL after start,
			// however long the grant took to answer.
			if c.fresh.IsZero() || start.Before(c.fresh) {
				c.fresh = start
			}
		}
		return nil
	}); err != nil {
		_, _ = c.clear(l)
		return nil, err
	}
	if req.Renew {
		c.wakeRenewal()
	}
	return l, nil
}

// clear removes the lease from the server if it still holds it there, and
// reports whether it did.
func (c *Core) clear(l *lease) (bool, error) {
	ctx, cancel := c.OpCtx()
	defer cancel()
	return c.d.Release(ctx, l.Mode(), l.Key(), l.owner, l.Token())
}

// Release clears the lease's row (or reader row) on the server with a
// statement conditional on its owner value and version, and still
// unexpired by the server's clock. If that changes nothing the lease had
// already lost the key: Release returns engine.ErrNotHeld and the lease
// ends with engine.ErrLeaseLost. The statement runs even if ctx is
// cancelled, bounded by the engine's op timeout.
func (l *lease) Release(ctx context.Context) error {
	if l.Signal.Closed() {
		return l.Signal.NotHeld(l.Key())
	}
	l.mu.Lock()
	l.releasing = true
	l.mu.Unlock()
	ok, err := l.c.clear(l)
	if err != nil {
		// Unknown whether the row is still ours; it is no longer renewed,
		// so it is lost either way. It is cleared in the background once
		// the server answers (clearLater), or expires by its TTL.
		l.forget()
		l.Signal.Close(fmt.Errorf("%w: release failed: %w", engine.ErrLeaseLost, err))
		oe := l.c.d.OpErr(ctx, "release", l.Key(), err)
		if errors.Is(l.c.d.OpErr(context.Background(), "release", l.Key(), err), engine.ErrUnavailable) {
			l.c.clearLater(l)
		}
		return oe
	}
	l.forget()
	if ok {
		l.Signal.Close(engine.ErrReleased)
		l.c.line.kick(l.Key())
		return nil
	}
	return l.Signal.NotHeld(l.Key())
}

// clearLater has the engine clear l, whose release got no answer, in the
// background: one goroutine per engine sends the pending releases one
// statement at a time, from 50ms after the failure and, while the server
// does not answer, twice as long after each failure up to a second, so an
// outage costs the server one statement per pause however many releases
// wait. The statement is the release's own (conditional on l's owner and
// token), so a late one clears nothing that is not l's. A lease is dropped
// once its validity has run out (the server expires its row by then) or
// the engine closes. Without it, a release lost to a blip kept the key's
// waiters waiting out the lease's TTL.
func (c *Core) clearLater(l *lease) {
	c.Mu.Lock()
	c.unreleased = append(c.unreleased, l)
	start := !c.clearing
	c.clearing = true
	c.Mu.Unlock()
	if start && !c.Frame.Go(c.clearPending) { // Frame.Go takes Mu
		c.Mu.Lock()
		c.unreleased, c.clearing = nil, false // closed: the rows expire
		c.Mu.Unlock()
	}
}

// clearPending runs clearLater's goroutine until no release is pending
// or the engine closes.
func (c *Core) clearPending() {
	pause := 50 * time.Millisecond
	for {
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-c.Frame.Closing():
			t.Stop()
			c.Mu.Lock()
			c.unreleased, c.clearing = nil, false
			c.Mu.Unlock()
			return
		}
		for {
			c.Mu.Lock()
			if len(c.unreleased) == 0 {
				c.clearing = false
				c.Mu.Unlock()
				return
			}
			l := c.unreleased[0]
			c.Mu.Unlock()
			l.mu.Lock()
			until := l.validFrom.Add(l.ttl)
			l.mu.Unlock()
			ok, err := c.clear(l)
			if err != nil && time.Now().Before(until) &&
				errors.Is(c.d.OpErr(context.Background(), "release", l.Key(), err), engine.ErrUnavailable) {
				break // the server is still away: l first again, after a pause
			}
			if ok {
				c.line.kick(l.Key())
			}
			pause = 50 * time.Millisecond
			c.Mu.Lock()
			c.unreleased = c.unreleased[1:]
			c.Mu.Unlock()
		}
		pause = min(2*pause, time.Second)
	}
}

// end closes the lease with err; with release it then clears it on the
// server (Close does, expiry does not need to). The holder is told first,
// so that its Done has closed before any waiter can be granted the key.
func (l *lease) end(err error, release bool) {
	told := l.Signal.Close(err)
	if release && told {
		_, _ = l.c.clear(l)
	}
	l.forget()
}

// forget stops the expiry timer and drops the lease from its engine.
func (l *lease) forget() {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.c.Frame.Forget(l)
}

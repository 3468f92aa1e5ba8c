package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cerberus-go/cerberus/engine"
)

// lease is a lease-strategy lease: the key's row (exclusive) or a reader
// row (shared) that names this lease's owner value until it is cleared or
// expires on the server's clock.
type lease struct {
	e     *Engine
	key   string
	mode  engine.Mode
	token uint64
	owner string
	ttl   time.Duration
	renew bool
	sig   *engine.Signal

	mu        sync.Mutex
	timer     *time.Timer // fixed-TTL expiry; nil with Renew
	releasing bool        // a Release is on the wire: renewal leaves it alone
	// validFrom is a local monotonic instant no later than the server's
	// now() of the last grant or successful renewal: the lease is surely
	// held until validFrom+ttl, measured by elapsed time only.
	validFrom time.Time
}

func (l *lease) Key() string           { return l.key }
func (l *lease) Mode() engine.Mode     { return l.mode }
func (l *lease) Token() uint64         { return l.token }
func (l *lease) Done() <-chan struct{} { return l.sig.Done() }
func (l *lease) Err() error            { return l.sig.Err() }

// acquireLease makes grant attempts until one succeeds, the request does
// not wait, or ctx ends. An attempt whose outcome is unknown (its statement
// failed in flight, or ctx ended during it) is undone in the background, so
// a grant the server made is never left behind and the caller never waits
// past ctx for the clean-up.
func (e *Engine) acquireLease(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := e.pace.Err(); err != nil {
		return nil, &engine.OpError{Engine: name, Op: "acquire", Key: req.Key, Err: err}
	}
	owner := e.owner()
	delay := e.cfg.minBackoff
	const maxTransient = 5
	transients := 0
	var kick <-chan struct{} // set once this waiter has the key's polling turn
	for {
		start := time.Now()
		token, ok, err := e.grantOnce(ctx, req, owner)
		switch {
		case err != nil && transient(err) && transients < maxTransient:
			transients++
			ok = false
		case err != nil:
			e.frame.RunUpTo(engine.UndoWait, func() { e.undoGrant(req, owner) })
			if ctx.Err() != nil {
				return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
			}
			return nil, e.opErr(ctx, "acquire", req.Key, err)
		}
		if ok {
			return e.grantInTime(req, owner, token, start)
		}
		if !req.Wait {
			return nil, fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key)
		}
		if kick == nil {
			// Only one waiter per key and engine polls the server; the
			// others wait here for their turn (see engine.Turns).
			k, done, err := e.turns.Take(ctx, req.Key, e.frame.Closing())
			if err != nil {
				if errors.Is(err, engine.ErrClosed) {
					return nil, err
				}
				return nil, errors.Join(engine.ErrNotAcquired, err)
			}
			defer done()
			kick, delay = k, e.cfg.minBackoff
			continue // try at once: the key may have come free meanwhile
		}
		if delay, err = e.backoff().Pause(ctx, e.frame.Closing(), kick, delay); err != nil {
			return nil, err
		}
	}
}

// grantInTime makes the lease of a grant the server made for a request
// sent at start, unless the answer came after the lease's TTL had run out
// (the process was stopped, or the network held it): the row may be
// someone else's by now.
func (e *Engine) grantInTime(req engine.Request, owner string, token uint64,
	start time.Time) (engine.Lease, error) {
	if time.Since(start) >= life(req.TTL) {
		e.frame.RunUpTo(engine.UndoWait, func() { e.undoGrant(req, owner) })
		return nil, fmt.Errorf("%w: %q: the grant arrived after its %v TTL had run out",
			engine.ErrNotAcquired, req.Key, req.TTL)
	}
	return e.granted(req, owner, token, start)
}

// backoff is the engine's wait between grant attempts.
func (e *Engine) backoff() engine.Backoff {
	return engine.Backoff{Min: e.cfg.minBackoff, Max: e.cfg.maxBackoff}
}

// grantOnce makes one attempt, bounded by ctx and the engine's op timeout:
// one batch of statements, sent in one round trip and run as one
// transaction. The first statement (lockRow) locks the key's row, creating
// it if need be; the statements after it see every grant of the key that
// committed before.
//
// An exclusive grant then sets the row's owner, value, expiry and version
// if no unexpired writer or reader holds the key. A shared grant clears
// the key's expired reader rows, adds its own with the row's next version
// if no unexpired writer holds the key (and, for a counted request, fewer
// than Limit unexpired readers do), and bumps the row's version to it.
func (e *Engine) grantOnce(ctx context.Context, req engine.Request, owner string) (uint64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	ttl := req.TTL.Microseconds()
	b := &pgx.Batch{}
	b.Queue(e.q.lockRow, req.Key)
	if req.Mode == engine.Shared {
		b.Queue(e.q.sharedTidy, req.Key)
		b.Queue(e.q.sharedAdd, req.Key, owner, ttl, req.Value, req.Limit)
		b.Queue(e.q.sharedBump, req.Key, owner)
	} else {
		b.Queue(e.q.grant, req.Key, owner, ttl, req.Value)
	}
	br := e.pool.SendBatch(ctx, b)
	token, ok, err := readGrant(br, b.Len()-1, req.Mode == engine.Shared)
	if cerr := br.Close(); err == nil && cerr != nil {
		return 0, false, cerr
	}
	return token, ok, err
}

// readGrant reads the results of a grant batch: first the statements
// before the grant's (n of them), then the grant's RETURNING row, if any.
func readGrant(br pgx.BatchResults, n int, shared bool) (uint64, bool, error) {
	if shared {
		n-- // the bump comes after the reader row
	}
	for range n {
		if _, err := br.Exec(); err != nil {
			return 0, false, err
		}
	}
	var token uint64
	err := br.QueryRow().Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if shared {
		if _, err := br.Exec(); err != nil {
			return 0, false, err
		}
	}
	return token, true, nil
}

// undoGrant clears a grant whose outcome is unknown because its statement
// failed in flight. The owner value is this attempt's alone, so clearing it
// cannot touch anyone else's lease. Best effort.
func (e *Engine) undoGrant(req engine.Request, owner string) {
	ctx, cancel := e.opCtx()
	defer cancel()
	q := e.q.undo
	if req.Mode == engine.Shared {
		q = e.q.readerUndo
	}
	_, _ = e.pool.Exec(ctx, q, req.Key, owner)
}

// granted registers a new lease, or gives it back if the engine closed
// meanwhile. start was taken before the grant was sent, so it is no later
// than the server's now() in that transaction.
func (e *Engine) granted(req engine.Request, owner string, token uint64,
	start time.Time) (engine.Lease, error) {
	l := &lease{
		e: e, key: req.Key, mode: req.Mode, token: token, owner: owner,
		ttl: req.TTL, renew: req.Renew, sig: engine.NewSignal(req.OnLost), validFrom: start,
	}
	if err := e.frame.Track(l, func() error {
		if !req.Renew {
			// The server expires the row at its now()+TTL; this timer,
			// started before the statement was sent, fires a margin
			// before that.
			l.mu.Lock()
			l.timer = time.AfterFunc(life(req.TTL)-time.Since(start),
				func() { l.end(engine.ErrLeaseLost, false) })
			l.mu.Unlock()
		}
		return nil
	}); err != nil {
		_, _ = e.clear(l)
		return nil, err
	}
	if req.Renew {
		e.wakeRenewal()
	}
	return l, nil
}

// clear removes the lease from the server if it still holds it there, and
// reports whether it did.
func (e *Engine) clear(l *lease) (bool, error) {
	ctx, cancel := e.opCtx()
	defer cancel()
	q := e.q.release
	if l.mode == engine.Shared {
		q = e.q.readerRelease
	}
	tag, err := e.pool.Exec(ctx, q, l.key, l.owner, int64(l.token))
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Release clears the lease's row (or reader row) on the server with a
// statement conditional on its owner value and version, and still
// unexpired by the server's clock. If that changes nothing the lease had
// already lost the key: Release returns engine.ErrNotHeld and the lease
// ends with engine.ErrLeaseLost. The statement runs even if ctx is
// cancelled, bounded by the engine's op timeout.
func (l *lease) Release(ctx context.Context) error {
	if l.sig.Closed() {
		return l.sig.NotHeld(l.key)
	}
	l.mu.Lock()
	l.releasing = true
	l.mu.Unlock()
	ok, err := l.e.clear(l)
	if err != nil {
		// Unknown whether the row is still ours; it is no longer renewed,
		// so it is lost either way (the server expires it by its TTL).
		l.forget()
		l.sig.Close(fmt.Errorf("%w: release failed: %w", engine.ErrLeaseLost, err))
		return l.e.opErr(ctx, "release", l.key, err)
	}
	l.forget()
	if ok {
		l.sig.Close(engine.ErrReleased)
		l.e.turns.Kick(l.key)
		return nil
	}
	return l.sig.NotHeld(l.key)
}

// end closes the lease with err; with release it first clears it on the
// server (Close does, expiry does not need to).
func (l *lease) end(err error, release bool) {
	if release && !l.sig.Closed() {
		_, _ = l.e.clear(l)
	}
	l.forget()
	l.sig.Close(err)
}

// forget stops the expiry timer and drops the lease from its engine.
func (l *lease) forget() {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.e.frame.Forget(l)
}

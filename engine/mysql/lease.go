package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// lease is a lease-strategy lease: a row (exclusive) or a reader row
// (shared) that names this lease's owner value until it is cleared or
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
	// NOW(6) of the last grant or successful renewal: the lease is surely
	// held until validFrom+ttl, measured by elapsed time only.
	validFrom time.Time
}

func (l *lease) Key() string           { return l.key }
func (l *lease) Mode() engine.Mode     { return l.mode }
func (l *lease) Token() uint64         { return l.token }
func (l *lease) Done() <-chan struct{} { return l.sig.Done() }
func (l *lease) Err() error            { return l.sig.Err() }

// life is how long after sending a grant or renewal a lease counts as
// held: its TTL less engine.Margin, so that Done closes ahead of the
// server's expiry even when this process's timers run late.
func life(ttl time.Duration) time.Duration { return ttl - engine.Margin(ttl) }

// transient reports server errors after which a grant attempt is simply
// repeated: InnoDB chose this statement as a deadlock victim or it waited
// too long for a row lock.
func transient(err error) bool {
	n := errNumber(err)
	return n == errDeadlock || n == errLockWaitTimeout
}

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
	exists := false
	const maxTransient = 5
	transients := 0
	var kick <-chan struct{} // set once this waiter has the key's polling turn
	for {
		start := time.Now()
		token, ok, err := e.grantOnce(ctx, req, owner, &exists)
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

// grantOnce makes one attempt, bounded by ctx and the engine's op timeout.
// exists records that the key's row is known to exist, which saves the
// INSERT on later attempts.
func (e *Engine) grantOnce(ctx context.Context, req engine.Request, owner string,
	exists *bool) (uint64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	ttl := req.TTL.Microseconds()
	if req.Mode == engine.Shared {
		return e.grantShared(ctx, req, owner, ttl)
	}
	res, err := e.db.ExecContext(ctx, e.q.grant, owner, ttl, req.Value, ttl, req.Key)
	if err != nil {
		return 0, false, err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		id, err := res.LastInsertId()
		return uint64(id), err == nil, err
	}
	if *exists {
		return 0, false, nil
	}
	res, err = e.db.ExecContext(ctx, e.q.insert, req.Key, owner, ttl, req.Value, ttl)
	if err != nil {
		return 0, false, err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return 1, true, nil
	}
	*exists = true
	return 0, false, nil
}

// grantShared is one shared attempt: a short transaction that bumps the key
// row's version if no unexpired writer holds it, clears readers that
// expired and adds this reader's row. The bump locks the key row until the
// commit, so the shared grants of a key run one at a time; a counted one
// (req.Limit above 0) adds its row only while fewer than Limit unexpired
// reader rows of the key exist, counted in the same statement
// (readerAddCounted).
func (e *Engine) grantShared(ctx context.Context, req engine.Request, owner string,
	ttl int64) (uint64, bool, error) {
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = tx.Rollback() }()
	token, ok, err := e.bumpShared(ctx, tx, req.Key)
	if !ok || err != nil {
		return 0, false, err
	}
	if _, err := tx.ExecContext(ctx, e.q.readerTidy, req.Key); err != nil {
		return 0, false, err
	}
	if req.Limit > 0 {
		res, err := tx.ExecContext(ctx, e.q.readerAddCounted, req.Key, owner, token, ttl, ttl,
			req.Value, req.Key, req.Limit)
		if err != nil {
			return 0, false, err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return 0, false, nil // every permit is held
		}
	} else if _, err := tx.ExecContext(ctx, e.q.readerAdd, req.Key, owner, token, ttl, ttl,
		req.Value); err != nil {
		return 0, false, err
	}
	if err := tx.Commit(); err != nil {
		return 0, false, err
	}
	return token, true, nil
}

// bumpShared raises the key row's version for a shared grant, in tx, if no
// unexpired writer holds the key, and returns the new version. A key with
// no row yet gets one with version 1.
func (e *Engine) bumpShared(ctx context.Context, tx *sql.Tx, key string) (uint64, bool, error) {
	res, err := tx.ExecContext(ctx, e.q.sharedGrant, key)
	if err != nil {
		return 0, false, err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		id, err := res.LastInsertId()
		return uint64(id), err == nil, err
	}
	res, err = tx.ExecContext(ctx, e.q.sharedInsert, key)
	if err != nil {
		return 0, false, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return 0, false, nil // held by a writer
	}
	return 1, true, nil
}

// undoGrant clears a grant whose outcome is unknown because its statement
// failed in flight. The owner value is this attempt's alone, so clearing it
// cannot touch anyone else's lease. Best effort.
func (e *Engine) undoGrant(req engine.Request, owner string) {
	ctx, cancel := e.opCtx()
	defer cancel()
	if req.Mode == engine.Shared {
		_, _ = e.db.ExecContext(ctx,
			"DELETE FROM `"+e.cfg.table+"_readers` WHERE `lock_key` = ? AND `owner` = ?", req.Key, owner)
		return
	}
	_, _ = e.db.ExecContext(ctx,
		"UPDATE `"+e.cfg.table+"` SET `owner` = NULL, `expires_at` = NULL WHERE `lock_key` = ? AND "+
			"`owner` = ?", req.Key, owner)
}

// granted registers a new lease, or gives it back if the engine closed
// meanwhile. start was taken before the grant statement was sent, so it is
// no later than the server's NOW(6) in that statement.
func (e *Engine) granted(req engine.Request, owner string, token uint64,
	start time.Time) (engine.Lease, error) {
	l := &lease{
		e: e, key: req.Key, mode: req.Mode, token: token, owner: owner,
		ttl: req.TTL, renew: req.Renew, sig: engine.NewSignal(req.OnLost), validFrom: start,
	}
	if err := e.frame.Track(l, func() error {
		if !req.Renew {
			// The server expires the row at its NOW(6)+TTL; this timer,
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
	var res sql.Result
	var err error
	if l.mode == engine.Shared {
		res, err = e.db.ExecContext(ctx, e.q.readerRelease, l.key, l.owner, l.token)
	} else {
		res, err = e.db.ExecContext(ctx, e.q.release, l.key, l.owner, l.token)
	}
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
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

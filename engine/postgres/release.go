package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
)

var _ engine.Releaser = (*Engine)(nil)

// ForceRelease frees key whoever holds it; see engine.Releaser and the
// package documentation ("Force release"): with the lease strategy one
// batch clears the holders and leaves their tombstones
// (forceReleaseLease's Free); with the session strategy the holders are
// asked to let go, and cut off if they do not (forceReleaseSession). A
// session engine without holder records (WithHolderRecords(false)) returns
// an error wrapping errors.ErrUnsupported, after checking the key.
func (e *Engine) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if e.cfg.strategy == StrategyLease {
		return e.core.ForceRelease(ctx, key, MaxKeyLen)
	}
	if e.noRecords() {
		if err := engine.CheckKey(key, MaxKeyLen); err != nil {
			return nil, err
		}
		return nil, e.errNoRecords("force release")
	}
	return e.forceReleaseSession(ctx, key)
}

// Free runs ForceRelease's transaction (see queries.release) as one batch:
// one round trip.
func (d leaseSQL) Free(ctx context.Context, key string) ([]sqlcore.Freed, error) {
	b := &pgx.Batch{}
	b.Queue(d.e.q.freeLock, key)
	b.Queue(d.e.q.free, key)
	br := d.e.pool.SendBatch(ctx, b)
	freed, err := readFreed(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		return nil, cerr
	}
	return freed, err
}

// readFreed reads the results of Free's batch.
func readFreed(br pgx.BatchResults) ([]sqlcore.Freed, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var freed []sqlcore.Freed
	for rows.Next() {
		var f sqlcore.Freed
		var mode int
		var token int64
		if err := rows.Scan(&mode, &f.Owner, &token, &f.Value); err != nil {
			return nil, err
		}
		f.Mode, f.Token = engine.Exclusive, uint64(token)
		if mode == 1 {
			f.Mode = engine.Shared
		}
		freed = append(freed, f)
	}
	return freed, rows.Err()
}

// Released reads the tombstones of owners with one SELECT.
func (d leaseSQL) Released(ctx context.Context, owners []string) (map[string]bool, error) {
	rows, err := d.e.pool.Query(ctx, d.e.q.released, owners)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]bool, len(owners))
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			return nil, err
		}
		out[o] = true
	}
	return out, rows.Err()
}

// readRevoked reads the revocations of c's session (the session
// strategy's ping) and calls each for every one. A server error on a
// session that stays open (a role without rights on the table) counts as
// a ping that succeeded, with no revocations.
func (e *Engine) readRevoked(ctx context.Context, c *pgxpool.Conn, each func(key string, token uint64)) error {
	rows, err := c.Query(ctx, e.q.revoked)
	if err != nil {
		return pingErr(c, err)
	}
	var (
		key   string
		token int64
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &token}, func() error {
		each(key, uint64(token))
		return nil
	})
	return pingErr(c, err)
}

// pingErr is nil for a server error that left c's session open.
func pingErr(c *pgxpool.Conn, err error) error {
	if err != nil && sqlState(err) != "" && !c.Conn().IsClosed() {
		return nil
	}
	return err
}

// revokedHolder is a holder ForceRelease revoked: its backend and the
// idle timeout of its session, in milliseconds.
type revokedHolder struct {
	h      engine.Holder
	pid    int32
	idleMS int64
}

// forceReleaseSession is ForceRelease with the session strategy. An advisory lock can be released by
// its own backend only, so it records a revocation for each holder
// (<table>_revoked, keyed by backend pid and key, with the token) in the
// statement that lists them; each holder's next ping (a third of its
// session's idle timeout, a third of its period) reads it, ends the lease
// with engine.ErrReleasedByOperator and then releases the lock. A holder
// that has not done so within its session's idle timeout (a lease without
// Renew on a pinned connection, which never pings, or a process that
// stopped and that the server has not yet cut off) gets its backend
// ended with pg_terminate_backend: that frees every lock of the session,
// so on a shared session connection every other lease of it ends too,
// with engine.ErrLeaseLost, at its next ping. ForceRelease returns once
// every holder's lock is free, within the longest idle timeout of the
// holders plus the op timeout. pg_terminate_backend needs the operator's
// role to be the holder's, a member of pg_signal_backend, or a superuser;
// without it the fallback fails with the server's error.
func (e *Engine) forceReleaseSession(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, MaxKeyLen); err != nil {
		return nil, err
	}
	if err := e.frame.Enter(ctx, nil); err != nil {
		return nil, err
	}
	defer e.frame.Exit()
	held, err := e.revoke(ctx, key)
	if err != nil {
		return nil, e.opErr(ctx, "release", key, err)
	}
	if len(held) == 0 {
		return nil, fmt.Errorf("%w: %q", engine.ErrNotHeld, key)
	}
	if err := e.awaitFree(ctx, key, held); err != nil {
		return nil, e.opErr(ctx, "release", key, err)
	}
	out := make([]engine.Holder, len(held))
	for i, r := range held {
		out[i] = r.h
	}
	return out, nil
}

// revoke lists the holders of key and records their revocations, in one
// statement.
func (e *Engine) revoke(ctx context.Context, key string) ([]revokedHolder, error) {
	qctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	classid, objid := lockParts(e.cfg.hash(key))
	rows, err := e.pool.Query(qctx, e.q.revoke, key, classid, objid)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (revokedHolder, error) {
		var (
			r    revokedHolder
			mode int
		)
		err := row.Scan(&r.pid, &mode, &r.h.Token, &r.h.Value, &r.idleMS)
		r.h.Mode = modeOf(mode)
		return r, err
	})
}

// awaitFree polls until no backend of held holds key's lock, ending with
// pg_terminate_backend each one still holding it after its idle timeout,
// then deletes their revocations.
func (e *Engine) awaitFree(ctx context.Context, key string, held []revokedHolder) error {
	start := time.Now()
	pids := make([]int32, len(held))
	idle := map[int32]time.Duration{}
	for i, r := range held {
		pids[i] = r.pid
		idle[r.pid] = time.Duration(r.idleMS) * time.Millisecond
	}
	classid, objid := lockParts(e.cfg.hash(key))
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		qctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
		rows, err := e.pool.Query(qctx, e.q.stillHeld, key, classid, objid, pids)
		var left []int32
		if err == nil {
			left, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		}
		cancel()
		if err != nil {
			return err
		}
		if len(left) == 0 {
			break
		}
		for _, pid := range left {
			if time.Since(start) >= idle[pid] {
				if err := e.terminate(ctx, pid); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.opTimeout)
	defer cancel()
	_, err := e.pool.Exec(qctx, e.q.unrevoke, key, pids)
	return err
}

// terminate ends the backend pid: the fallback for a holder that did not
// act on its revocation within its period.
func (e *Engine) terminate(ctx context.Context, pid int32) error {
	qctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	var ok bool
	return e.pool.QueryRow(qctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok)
}

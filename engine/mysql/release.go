package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
)

var _ engine.Releaser = (*Engine)(nil)

// ForceRelease frees key whoever holds it; see engine.Releaser and the
// package documentation ("Force release"). A session engine without holder
// records (WithHolderRecords(false)) returns an error wrapping
// errors.ErrUnsupported, after checking the key.
func (e *Engine) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if e.noRecords() {
		if err := engine.CheckKey(key, MaxKeyLen); err != nil {
			return nil, err
		}
		return nil, e.errNoRecords("force release")
	}
	switch e.cfg.strategy {
	case StrategyRow:
		return e.forceReleaseRow(ctx, key)
	case StrategySession:
		return e.forceReleaseSession(ctx, key)
	}
	return e.core.ForceRelease(ctx, key, MaxKeyLen)
}

// Free runs ForceRelease's transaction (see queries.free): it reads the
// key's unexpired writer and readers with locking reads, writes their
// tombstones, clears them, and deletes expired tombstones.
func (d leaseSQL) Free(ctx context.Context, key string) ([]sqlcore.Freed, error) {
	e := d.e
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	freed, ttls, err := e.freedLeases(ctx, tx, key)
	if err != nil || len(freed) == 0 {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, e.q.freeTidy); err != nil {
		return nil, err
	}
	for i, f := range freed {
		clear := e.q.freeClear
		if f.Mode == engine.Shared {
			clear = e.q.freeClearReaders
		}
		if _, err := tx.ExecContext(ctx, e.q.tombstone, f.Owner, key, f.Token, ttls[i]); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, clear, key, f.Owner); err != nil {
			return nil, err
		}
	}
	return freed, tx.Commit()
}

// freedLeases reads, in tx, the unexpired writer and readers of key that
// Free clears, with their TTLs in microseconds.
func (e *Engine) freedLeases(ctx context.Context, tx *sql.Tx, key string) ([]sqlcore.Freed, []int64, error) {
	var freed []sqlcore.Freed
	var ttls []int64
	var owner, value sql.NullString
	var version uint64
	var ttl int64
	var held bool
	err := tx.QueryRowContext(ctx, e.q.freeRow, key).Scan(&owner, &version, &value, &ttl, &held)
	switch {
	case err == sql.ErrNoRows:
		return nil, nil, nil // no grant ever: no readers either
	case err != nil:
		return nil, nil, err
	case held:
		freed = append(freed, sqlcore.Freed{Owner: owner.String,
			Holder: engine.Holder{Mode: engine.Exclusive, Token: version, Value: value.String}})
		ttls = append(ttls, ttl)
	}
	rows, err := tx.QueryContext(ctx, e.q.freeReaders, key)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&owner, &version, &value, &ttl); err != nil {
			return nil, nil, err
		}
		freed = append(freed, sqlcore.Freed{Owner: owner.String,
			Holder: engine.Holder{Mode: engine.Shared, Token: version, Value: value.String}})
		ttls = append(ttls, ttl)
	}
	return freed, ttls, rows.Err()
}

// Released reads the tombstones of owners with one SELECT.
func (d leaseSQL) Released(ctx context.Context, owners []string) (map[string]bool, error) {
	args := make([]any, len(owners))
	for i, o := range owners {
		args[i] = o
	}
	return d.e.aliveOwners(ctx, fmt.Sprintf(d.e.q.released, placeholders(len(owners))), args)
}

// rowOwner is the owner value a row-strategy holder writes into its
// record: the lease's own owner value and, after a slash, its
// connection's CONNECTION_ID(), which ForceRelease kills.
func rowOwner(owner string, connID uint64) string {
	return owner + "/" + strconv.FormatUint(connID, 10)
}

// forceReleaseRow frees key with the row strategy: it reads the holders'
// uncommitted records (READ UNCOMMITTED, as Holders does), commits a
// tombstone for each, reads the records again, and KILLs the connection
// of each holder still there, which
// rolls its transaction back and frees the row lock; InnoDB grants the
// next waiter in its queue at once. The holder's connection check finds
// its session gone and the tombstone there (see rowLease.lostErr).
func (e *Engine) forceReleaseRow(ctx context.Context, key string) ([]engine.Holder, error) {
	qctx, exit, err := e.core.EnterKey(ctx, key, MaxKeyLen)
	if err != nil {
		return nil, err
	}
	defer exit()
	freed, err := e.rowRecords(qctx, key)
	if err != nil {
		return nil, e.opErr(ctx, "force release", key, err)
	}
	if len(freed) == 0 {
		return nil, fmt.Errorf("%w: %q: nobody holds it", engine.ErrNotHeld, key)
	}
	out := make([]engine.Holder, len(freed))
	for i, f := range freed {
		if _, err := e.db.ExecContext(qctx, e.q.tombstone, f.Owner, key, f.Token, f.ttlUS); err != nil {
			return nil, e.opErr(ctx, "force release", key, err)
		}
		out[i] = f.Holder
	}
	// Read the records again just before the KILLs: a holder that
	// released meanwhile may have given its connection to a new lease of
	// its engine, which a KILL would end. Its record is gone by then.
	still, err := e.rowRecords(qctx, key)
	if err != nil {
		return nil, e.opErr(ctx, "force release", key, err)
	}
	for _, f := range still {
		if slices.ContainsFunc(freed, func(x rowFreed) bool { return x.Owner == f.Owner }) {
			if err := e.killRow(qctx, f.Owner); err != nil {
				return nil, e.opErr(ctx, "force release", key, err)
			}
		}
	}
	return out, nil
}

// rowFreed is a row-strategy holder's record: what Holders shows, its
// owner value (rowOwner), and its lease period.
type rowFreed struct {
	sqlcore.Freed
	ttlUS int64
}

// rowRecords reads the uncommitted records of key's row holders, in token
// order.
func (e *Engine) rowRecords(ctx context.Context, key string) ([]rowFreed, error) {
	tx, err := e.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadUncommitted, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, e.q.rowRecords, key, key)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []rowFreed
	for rows.Next() {
		var f rowFreed
		var mode int
		var value sql.NullString
		if err := rows.Scan(&mode, &f.Token, &value, &f.Owner, &f.ttlUS); err != nil {
			return nil, err
		}
		f.Mode, f.Value = engine.Exclusive, value.String
		if mode == 1 {
			f.Mode = engine.Shared
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// killRow KILLs the connection of the holder whose owner value is owner.
func (e *Engine) killRow(ctx context.Context, owner string) error {
	i := strings.LastIndexByte(owner, '/')
	id, err := strconv.ParseUint(owner[i+1:], 10, 64)
	if i < 0 || err != nil {
		return fmt.Errorf("a holder record with no connection id: %q", owner)
	}
	_, err = e.db.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
	if errNumber(err) == errNoSuchThread {
		return nil // the holder's session ended meanwhile
	}
	return err
}

// errNoSuchThread is the server's answer to KILL of a connection that is
// gone.
const errNoSuchThread = 1094

// tombstoned reports whether a row-strategy holder whose owner value is
// owner has a tombstone: an operator freed it. One SELECT, within the op
// timeout; false if it fails.
func (e *Engine) tombstoned(owner string) bool {
	ctx, cancel := e.core.OpCtx()
	defer cancel()
	found, err := e.aliveOwners(ctx, fmt.Sprintf(e.q.released, "?"), []any{owner})
	return err == nil && found[owner]
}

// forceReleaseSession is ForceRelease of the session strategy. It reads the key's holder (the row of the key's lock name, if its
// connection holds the name), then one CALL of "<table>_kill1" records the
// holder's token as released and kills the holder's connection with KILL
// CONNECTION, which frees the name at once: a session lease pins a
// connection of its own, so the KILL ends no other lease. The holder
// learns it at its next ping (every WithConnCheck, and a third of its
// lease period at most), which fails; it then reads the record and ends
// with engine.ErrReleasedByOperator. A holder in this engine is
// told at once. KILL CONNECTION of another user's connection needs the
// CONNECTION_ADMIN (MySQL) or CONNECTION ADMIN (MariaDB) privilege.
func (e *Engine) forceReleaseSession(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, MaxKeyLen); err != nil {
		return nil, err
	}
	if err := e.frame.Enter(ctx, nil); err != nil {
		if errors.Is(err, engine.ErrClosed) {
			return nil, err
		}
		return nil, ctx.Err()
	}
	defer e.frame.Exit()
	qctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	name := lockName(e.cfg.table, key)
	var (
		conn, token uint64
		value       []byte
		idle        int
		killed      int
	)
	err := e.db.QueryRowContext(qctx, e.q.sessHolder, name, key).Scan(&conn, &token, &value, &idle)
	if err == nil && idle > 0 {
		return e.revokeShared(ctx, key, name, conn, token, string(value), time.Duration(idle)*time.Second)
	}
	if err == nil {
		err = e.db.QueryRowContext(qctx, e.q.sessKill, name, conn, token).Scan(&killed)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows) || err == nil && killed == 0:
		return nil, fmt.Errorf("%w: %q is not held", engine.ErrNotHeld, key)
	case err != nil:
		return nil, e.opErr(ctx, "force release", key, err)
	}
	e.endKilled(conn, token)
	return []engine.Holder{{Mode: engine.Exclusive, Token: token, Value: string(value)}}, nil
}

// endKilled ends, with engine.ErrReleasedByOperator, the lease of this
// engine on connection conn with token, if there is one: a pinned lease,
// or one on a shared connection, which lets its name go.
func (e *Engine) endKilled(conn, token uint64) {
	var (
		hit    *sessionLease
		shared []*muxLease // checked after e.mu: a shared connection's grant takes e.mu under its own
	)
	e.mu.Lock()
	for l := range e.frame.AllLocked() {
		switch s := l.(type) {
		case *sessionLease:
			if s.conn == conn && s.token == token {
				hit = s
			}
		case *muxLease:
			if s.Token() == token {
				shared = append(shared, s)
			}
		}
	}
	e.mu.Unlock()
	if hit != nil {
		hit.end(fmt.Errorf("%w: %q", engine.ErrReleasedByOperator, hit.key))
	}
	for _, l := range shared {
		if c, ok := l.Conn().(*muxConn); ok && c.rc.id == conn {
			l.End(fmt.Errorf("%w: %q", engine.ErrReleasedByOperator, l.Key()))
		}
	}
}

// revokeShared is ForceRelease of a lease held on a shared connection
// (WithSessionConns), conn, whose wait_timeout is idle: killing the
// connection would end every other lease on it, so the lease's token is
// recorded as released (sessRevoke) and the holder lets the name go
// itself: at once in this engine, else at its backend's next ping, which
// reads the record (every WithConnCheck, and a third of the shortest
// lease period on the connection at most). It waits, polling, until the
// name is free of that lease. A holder that has not let go within idle
// (a process of a version that reads no revocations; a stopped one is cut
// off by its wait_timeout by then) is killed, with every lease of its
// connection.
func (e *Engine) revokeShared(ctx context.Context, key, name string, conn, token uint64, value string,
	idle time.Duration) ([]engine.Holder, error) {
	qctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	res, err := e.db.ExecContext(qctx, e.q.sessRevoke, name, conn, token)
	cancel()
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	switch {
	case err != nil:
		return nil, e.opErr(ctx, "force release", key, err)
	case n == 0:
		return nil, fmt.Errorf("%w: %q is not held", engine.ErrNotHeld, key)
	}
	e.endKilled(conn, token)
	start := time.Now()
	for wait := 2 * time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		qctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
		var still int
		err := e.db.QueryRowContext(qctx, e.q.sessStill, name, conn, token).Scan(&still)
		cancel()
		switch {
		case err != nil:
			return nil, e.opErr(ctx, "force release", key, err)
		case still == 0:
			return []engine.Holder{{Mode: engine.Exclusive, Token: token, Value: value}}, nil
		case time.Since(start) >= idle:
			kctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
			_, err := e.db.ExecContext(kctx, fmt.Sprintf("KILL CONNECTION %d", conn))
			cancel()
			if err != nil && errNumber(err) != errNoSuchThread {
				return nil, e.opErr(ctx, "force release", key, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, e.opErr(ctx, "force release", key, ctx.Err())
		case <-time.After(wait):
		}
	}
}

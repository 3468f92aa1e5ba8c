package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
)

// The session strategy's shared connections (WithSessionConns) are a
// sqlcore.Mux keyed by lock name: muxConn is its statements on one
// connection, muxDriver pins them.

// muxLease is a session lease on a shared connection.
type muxLease = sqlcore.MuxLease[string]

// muxDriver pins the shared connections of e.
type muxDriver struct{ e *Engine }

// Dial pins a connection for a shared session, bounded by ctx and the op
// timeout: one of Engine.muxDB if there is one, else of the engine's pool.
// It counts among the WithMaxConns budget for as long as it lives.
func (d muxDriver) Dial(ctx context.Context) (sqlcore.MuxConn[string], error) {
	ctx, cancel := context.WithTimeout(ctx, d.e.cfg.opTimeout)
	defer cancel()
	var (
		rc  *rowConn
		err error
	)
	if d.e.muxDB != nil {
		rc, err = d.e.pinConn(ctx, d.e.muxDB)
	} else {
		rc, err = d.e.getConn(ctx)
	}
	if err != nil {
		return nil, err
	}
	c := &muxConn{e: d.e, rc: rc}
	if err := c.prepare(ctx); err != nil {
		c.Close(false)
		return nil, err
	}
	return c, nil
}

// revokedBound bounds Revoked's read: the leases it names are past their
// validity already, and must not wait long for their reason.
const revokedBound = 250 * time.Millisecond

// Revoked returns those of leases whose tokens a force release recorded as
// their names' released ones: the releaser killed the connection (or the
// server cut it) while this process was stopped, and the name may have
// been granted again since, which keeps the released token, not the
// connection, in the name's row. One read on another connection, bounded
// by revokedBound; nil on an error.
func (d muxDriver) Revoked(leases []*muxLease) []*muxLease {
	ctx, cancel := context.WithTimeout(context.Background(), min(d.e.cfg.opTimeout, revokedBound))
	defer cancel()
	rows, err := d.e.db.QueryContext(ctx, d.e.q.sessReleased)
	if err != nil {
		return nil
	}
	defer rows.Close()
	released := map[string]uint64{}
	for rows.Next() {
		var (
			name  string
			token uint64
		)
		if rows.Scan(&name, &token) != nil {
			return nil
		}
		released[name] = token
	}
	if rows.Err() != nil {
		return nil
	}
	var out []*muxLease
	for _, l := range leases {
		if t, ok := released[l.Lock()]; ok && t == l.Token() {
			out = append(out, l)
		}
	}
	return out
}

// muxConn is one shared session connection. Each statement is bounded by
// the op timeout; one that runs out cuts the connection, which ends the
// session.
//
// Its grant and its release are prepared on the server when it is dialled
// (unless the server refuses) and then executed, which the server does
// without parsing them again: with interpolateParams a statement is sent
// as text, which MariaDB parses each time. Side by side on fresh
// connections, a prepared bare GET_LOCK/RELEASE_LOCK ran at 1.11x-1.22x
// the same statements as text, and the grant and release without holder
// records prepared at 0.96x-1.07x the bare ones as text.
type muxConn struct {
	e  *Engine
	rc *rowConn
	// grant is the one-statement try (sessTry, or sessClockGrant without
	// holder records) and release sessRelease, prepared on rc.
	grant, release *sql.Stmt
}

// prepare prepares c's grant and release on the server. A server that
// refuses (its max_prepared_stmt_count reached, say) leaves c sending
// them as text; an error is the connection's.
func (c *muxConn) prepare(ctx context.Context) error {
	grant := c.e.q.sessTry
	if !c.e.cfg.records {
		grant = c.e.q.sessClockGrant
	}
	var err error
	if c.grant, err = c.rc.conn.PrepareContext(ctx, grant); err == nil {
		c.release, err = c.rc.conn.PrepareContext(ctx, c.e.q.sessRelease)
	}
	if err == nil || errNumber(err) == 0 {
		return err
	}
	if c.grant != nil {
		_ = c.grant.Close()
	}
	c.grant, c.release = nil, nil
	return nil
}

// grantExec runs the grant, query, with args: prepared if c prepared it
// (c.grant), else as text.
func (c *muxConn) grantExec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if c.grant != nil {
		return c.grant.ExecContext(ctx, args...)
	}
	return c.rc.conn.ExecContext(ctx, query, args...)
}

// grantRow is grantExec for a grant that answers a row.
func (c *muxConn) grantRow(ctx context.Context, query string, args ...any) *sql.Row {
	if c.grant != nil {
		return c.grant.QueryRowContext(ctx, args...)
	}
	return c.rc.conn.QueryRowContext(ctx, query, args...)
}

// releaser is c's release, prepared if c prepared it.
func (c *muxConn) releaser() releaser {
	if c.release != nil {
		return c.release
	}
	return connRelease{c.rc.conn, c.e.q.sessRelease}
}

// opCtx is the context of one statement on c: on a connection whose
// connector bounds every socket read and write by the op timeout
// (Engine.muxDB), one that never ends, so that go-sql-driver starts no
// watcher for it (handing each statement's context to the connection's
// watcher goroutine and back cost 5,000 uncontended cycles 552 ms of
// waits for a thread to wake on a 2-core machine, and the engine ran
// about 30% faster without them); otherwise the op timeout.
func (c *muxConn) opCtx() (context.Context, context.CancelFunc) {
	if c.rc.bounded {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), c.e.cfg.opTimeout)
}

// Grant runs the session strategy's one-statement try (GET_LOCK(name, 0);
// see sessionGrant, and without holder records queries.clockSession),
// after setting the session's wait_timeout for a lease period of idle if
// it has another.
func (c *muxConn) Grant(req engine.Request, name string, idle time.Duration) (sqlcore.MuxAnswer, error) {
	ctx, cancel := c.opCtx()
	defer cancel()
	secs := idleTimeout(idle)
	if c.rc.idleMax != secs {
		if _, err := c.rc.conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d", secs)); err != nil {
			return sqlcore.MuxAnswer{Dead: true}, err
		}
		c.rc.idleMax = secs
	}
	var n, token int64
	if c.e.cfg.records {
		res, err := c.grantExec(ctx, c.e.q.sessTry, name, req.Key, req.Value, secs, name)
		if err == nil {
			if n, err = res.RowsAffected(); err == nil && n > 0 {
				token, err = res.LastInsertId()
			}
		}
		return c.granted(ctx, name, idle, n, token, err)
	}
	var ans sql.NullString
	var a grantAnswer
	err := c.grantRow(ctx, c.e.q.sessClockGrant, name, 0).Scan(&ans)
	if err == nil {
		if a, err = clockAnswer(ans); a.g == 1 {
			n, token = 1, int64(a.token)
		}
	}
	res, err := c.granted(ctx, name, idle, n, token, err)
	res.Free = a.free
	return res, err
}

// granted is Grant's answer for a try that affected n rows (1 when it
// granted) with token, or failed with err.
func (c *muxConn) granted(ctx context.Context, name string, idle time.Duration, n, token int64,
	err error) (sqlcore.MuxAnswer, error) {
	switch {
	case err != nil && errNumber(err) != 0:
		// A server error that leaves the session open (a full names
		// table, a missing privilege), but GET_LOCK may have granted the
		// name before it: this session did not hold it, so one
		// RELEASE_LOCK frees exactly that.
		if _, uerr := c.rc.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", name); uerr != nil {
			return sqlcore.MuxAnswer{Dead: true}, err
		}
		return sqlcore.MuxAnswer{Cut: idle}, err
	case err != nil:
		return sqlcore.MuxAnswer{Dead: true}, err
	}
	return sqlcore.MuxAnswer{Token: uint64(token), Granted: n > 0, Cut: idle}, nil
}

// Undo runs RELEASE_LOCK of name, after a grant the engine could not keep.
func (c *muxConn) Undo(_ engine.Request, name string) error {
	ctx, cancel := c.opCtx()
	defer cancel()
	_, err := c.rc.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", name)
	return err
}

// Unlock runs RELEASE_LOCK of l's name: without holder records, once the
// lease's Free time has passed (releaseName).
func (c *muxConn) Unlock(l *muxLease) (bool, error) {
	ctx, cancel := c.opCtx()
	defer cancel()
	return releaseName(ctx, c.releaser(), l.Lock(), l.Free())
}

// Ping reads the session's leases whose token a force release recorded as
// released (sessRevoke), bounded by deadline.
func (c *muxConn) Ping(deadline time.Time, find func(string) *muxLease) ([]*muxLease, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	rows, err := c.rc.conn.QueryContext(ctx, c.e.q.sessRevoked, c.rc.id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*muxLease
	for rows.Next() {
		var (
			name  string
			token uint64
		)
		if err := rows.Scan(&name, &token); err != nil {
			return nil, err
		}
		if l := find(name); l != nil && l.Token() == token {
			out = append(out, l)
		}
	}
	return out, rows.Err()
}

// Rest puts the server's own wait_timeout back.
func (c *muxConn) Rest() error {
	ctx, cancel := c.opCtx()
	defer cancel()
	if _, err := c.rc.conn.ExecContext(ctx, "SET SESSION wait_timeout = DEFAULT"); err != nil {
		return err
	}
	c.rc.idleMax = 0
	return nil
}

// Close closes the connection, which ends the session and frees its names.
// The session leaves nothing in tables to delete.
func (c *muxConn) Close(bool) {
	for _, st := range []*sql.Stmt{c.grant, c.release} {
		if st != nil {
			_ = st.Close()
		}
	}
	c.e.discard(c.rc)
}

package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// The session strategy's shared connections (WithSessionConns) are a
// sqlcore.Mux keyed by advisory lock key: muxConn is its statements on one
// connection, muxDriver dials them.

// clockGuard is how long closeConn waits before it closes a connection,
// without holder records (kit.ClockGuard); tests raise it to see it.
var clockGuard = kit.ClockGuard

// muxLease is a session lease on a shared connection.
type muxLease = sqlcore.MuxLease[int64]

// muxDriver dials the shared connections of e.
type muxDriver struct{ e *Engine }

// Dial takes a connection out of the pool for a shared session: its
// session commits without waiting for a WAL flush (the tokens' rule holds
// without one, see sessionGrant, and its holder rows are unlogged), and it
// first deletes what sessions that ended without deleting theirs left.
func (d muxDriver) Dial(ctx context.Context) (sqlcore.MuxConn[int64], error) {
	e := d.e
	actx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	c, err := e.pool.Acquire(actx)
	if err != nil {
		return nil, err
	}
	// The shared holders' rows and the revocations of sessions that ended
	// without deleting theirs (a crash, a kill): best effort, as a grant
	// overwrites a row of its own pid and key and Holders skips rows whose
	// backend holds no lock.
	_, _ = c.Exec(actx, e.q.deadTidy)
	if _, err := c.Exec(actx, "SET synchronous_commit = off"); err != nil {
		e.closeConn(c)
		return nil, err
	}
	return &muxConn{e: e, conn: c}, nil
}

// Revoked returns nil: a holder stopped past its validity is told
// engine.ErrLeaseLost.
func (muxDriver) Revoked([]*muxLease) []*muxLease { return nil }

// muxConn is one shared session connection. Its statements run with a
// context that never ends, bounded by the socket's deadline (bound)
// instead of a timer each.
type muxConn struct {
	e    *Engine
	conn *pgxpool.Conn
	// idle is the session's idle_session_timeout as this engine set it,
	// 0 while the session has the server's own.
	idle time.Duration
	// boundAt is the deadline of the session's socket (see bound).
	boundAt time.Time
}

// Grant runs the try-grant form of the grant statement (see
// sessionGrant), which the server refuses while a conflicting session
// holds the key or waits for it ahead of this request; it sets the
// session's idle_session_timeout, when granted, if it is not set for idle
// already.
func (c *muxConn) Grant(req engine.Request, h int64, idle time.Duration) (sqlcore.MuxAnswer, error) {
	shared, set := 0, 0
	if req.Mode == engine.Shared {
		shared = 1
	}
	if c.idle == 0 || idleTimeout(idle) != idleTimeout(c.idle) {
		set = 1
	}
	var (
		ok    bool
		token *int64
	)
	c.bound()
	var err error
	if c.e.cfg.records {
		err = c.conn.QueryRow(context.Background(), c.e.q.muxTry[shared][set],
			c.e.grantArgs(h, idleTimeout(idle), req, set == 1)...).Scan(&ok, &token)
	} else {
		// One column: the server's clock, NULL when refused
		// (queries.clockSession).
		var clock *time.Time
		err = c.conn.QueryRow(context.Background(), c.e.q.muxTry[shared][set],
			c.e.grantArgs(h, idleTimeout(idle), req, set == 1)...).Scan(&clock)
		if ok = clock != nil; ok {
			n := int64(kit.Ticks(*clock))
			token = &n
		}
	}
	switch {
	case err != nil && sqlState(err) != "" && !c.conn.Conn().IsClosed():
		// A server error that leaves the session open (a full lock
		// table, a missing privilege), but the lock may have been taken
		// before it (session advisory locks outlive their
		// transaction): this session did not hold h, so an unlock of h
		// frees exactly that.
		if uerr := c.Undo(req, h); uerr != nil {
			return sqlcore.MuxAnswer{Dead: true}, err
		}
		return sqlcore.MuxAnswer{Cut: c.idle}, err
	case err != nil:
		return sqlcore.MuxAnswer{Dead: true}, err
	case !ok:
		return sqlcore.MuxAnswer{Cut: c.idle}, nil
	case token == nil:
		_ = c.Undo(req, h)
		return sqlcore.MuxAnswer{Cut: c.idle}, errors.New("the grant drew no token")
	}
	c.idle = idle
	return sqlcore.MuxAnswer{Token: uint64(*token), Granted: true, Cut: idle}, nil
}

// Undo unlocks h in req's mode on the session, after a grant that failed.
func (c *muxConn) Undo(req engine.Request, h int64) error {
	fn := "pg_advisory_unlock"
	if req.Mode == engine.Shared {
		fn = "pg_advisory_unlock_shared"
	}
	c.bound()
	_, err := c.conn.Exec(context.Background(), "SELECT "+fn+"($1::bigint)", h)
	return err
}

// Unlock runs the release statement of l (see sessionRelease): the bare
// unlock of an exclusive lease, and a shared one's holder row deleted;
// without holder records, the unlock once the server's clock has passed
// the lease's token.
func (c *muxConn) Unlock(l *muxLease) (held bool, err error) {
	q, args := c.e.q.muxRelease[0], []any{l.Lock()}
	switch {
	case !c.e.cfg.records:
		// The token is the server's clock: the release waits on the
		// server for it to pass the token's tick (see
		// queries.clockSession).
		if l.Mode() == engine.Shared {
			q = c.e.q.muxRelease[1]
		}
		args = append(args, kit.TickEnd(l.Token()))
	case l.Mode() == engine.Shared:
		q, args = c.e.q.muxRelease[1], []any{l.Lock(), l.Key()}
	}
	c.bound()
	err = c.conn.QueryRow(context.Background(), q, args...).Scan(&held)
	return held, err
}

// Ping reads the session's revocations (see ForceRelease), bounded by
// deadline, which may be further off than an op timeout.
func (c *muxConn) Ping(deadline time.Time, find func(int64) *muxLease) ([]*muxLease, error) {
	c.unbound()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var revoked []*muxLease
	err := c.e.readRevoked(ctx, c.conn, func(key string, token uint64) {
		if l := find(c.e.cfg.hash(key)); l != nil && l.Key() == key && l.Token() == token {
			revoked = append(revoked, l)
		}
	})
	return revoked, err
}

// Rest resets the session's idle_session_timeout to the server's own.
func (c *muxConn) Rest() error {
	c.bound()
	if _, err := c.conn.Exec(context.Background(), "RESET idle_session_timeout"); err != nil {
		return err
	}
	c.idle = 0
	return nil
}

// Close deletes, with tidy, the session's holder rows and revocations,
// then closes the connection, which ends the session and every advisory
// lock of it.
func (c *muxConn) Close(tidy bool) {
	if tidy {
		c.unbound()
		ctx, cancel := c.e.core.OpCtx()
		_, _ = c.conn.Exec(ctx, c.e.q.sessionTidy)
		cancel()
	}
	c.e.closeConn(c.conn)
}

// bound sets the deadline of the session's socket to one and a half op
// timeouts from now, if less than half of one is left: every statement
// sent with a context that cannot end is cut (which ends the session)
// within one to one and a half op timeouts, and only one statement in many
// pays for a timer.
func (c *muxConn) bound() {
	now := time.Now()
	if c.boundAt.Sub(now) >= c.e.cfg.opTimeout/2 {
		return
	}
	c.boundAt = now.Add(c.e.cfg.opTimeout * 3 / 2)
	_ = c.conn.Conn().PgConn().Conn().SetDeadline(c.boundAt)
}

// unbound clears the deadline of the session's socket before a statement
// that its context bounds instead: a deadline left from bound would cut it
// once it passed, however long the leases' validity (a session whose
// leases are only pinged for longer than an op timeout).
func (c *muxConn) unbound() {
	if c.boundAt.IsZero() {
		return
	}
	c.boundAt = time.Time{}
	_ = c.conn.Conn().PgConn().Conn().SetDeadline(time.Time{})
}

// closeConn closes a connection taken from the pool, which ends its server
// session and every advisory lock of the session. Without holder records
// it first waits clockGuard, which is after the answer of any grant on the
// connection: a lock freed by the end of the session, like one freed by a
// release (see queries.clockSession), is then freed in a later tick of the
// server's clock than its token's.
func (e *Engine) closeConn(c *pgxpool.Conn) {
	if e.noRecords() {
		kit.WaitPast(time.Now(), clockGuard)
	}
	raw := c.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = raw.Close(ctx)
	cancel()
}

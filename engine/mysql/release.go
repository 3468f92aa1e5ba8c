package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Releaser = (*Engine)(nil)

// ForceRelease frees key whoever holds it; see engine.Releaser. Only the
// session strategy has it; the others return an error wrapping
// errors.ErrUnsupported.
//
// It reads the key's holder (the row of the key's lock name, if its
// connection holds the name), then one CALL of "<table>_kill1" records the
// holder's token as released and kills the holder's connection with KILL
// CONNECTION, which frees the name at once: a session lease pins a
// connection of its own, so the KILL ends no other lease. The holder
// learns it at its next ping (every WithConnCheck, and a third of its
// lease period at most), which fails; it then reads the record and ends
// with engine.ErrReleasedByOperator. A holder in this engine is
// told at once. KILL CONNECTION of another user's connection needs the
// CONNECTION_ADMIN (MySQL) or CONNECTION ADMIN (MariaDB) privilege.
func (e *Engine) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, MaxKeyLen); err != nil {
		return nil, err
	}
	if e.cfg.strategy != StrategySession {
		return nil, fmt.Errorf("mysql: force release with strategy %q: %w", e.cfg.strategy, errors.ErrUnsupported)
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
		killed      int
	)
	err := e.db.QueryRowContext(qctx, e.q.sessHolder, name, key).Scan(&conn, &token, &value)
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
// engine on connection conn with token, if there is one.
func (e *Engine) endKilled(conn, token uint64) {
	var hit *sessionLease
	e.mu.Lock()
	for l := range e.frame.AllLocked() {
		if s, ok := l.(*sessionLease); ok && s.conn == conn && s.token == token {
			hit = s
		}
	}
	e.mu.Unlock()
	if hit != nil {
		hit.end(fmt.Errorf("%w: %q", engine.ErrReleasedByOperator, hit.key))
	}
}

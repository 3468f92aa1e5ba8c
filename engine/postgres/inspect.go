package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Inspector = (*Engine)(nil)

// Holders returns the leases that hold key now, in grant order; see
// engine.Inspector. It is one SELECT. With the lease strategy it reads the
// key's row and its reader rows, listing only those unexpired by the
// server's now(). With the session strategy it reads the key's holder
// rows, listing only those whose backend holds the key's advisory lock now
// (pg_locks), so that the row of a holder whose session ended without a
// release (a crash, a kill, the idle cut-off) never shows. It returns
// engine.ErrClosed after Close. A session engine without holder records
// (WithHolderRecords(false)) returns an error wrapping
// errors.ErrUnsupported.
func (e *Engine) Holders(ctx context.Context, key string) ([]engine.Holder, error) {
	if e.noRecords() {
		if err := engine.CheckKey(key, MaxKeyLen); err != nil {
			return nil, err
		}
		return nil, e.errNoRecords("holders")
	}
	return e.core.Holders(ctx, key, e.Limits().MaxKeyLen, e.readHolders)
}

// readHolders runs the holders query of the engine's strategy.
func (e *Engine) readHolders(ctx context.Context, key string) ([]engine.Holder, error) {
	var rows pgx.Rows
	var err error
	if e.cfg.strategy == StrategyLease {
		rows, err = e.pool.Query(ctx, e.q.holders, key)
	} else {
		classid, objid := lockParts(e.cfg.hash(key))
		rows, err = e.pool.Query(ctx, e.q.sessionHolders, key, classid, objid)
	}
	if err != nil {
		return nil, err
	}
	return scanHolders(rows)
}

// scanHolders reads rows of (mode, token, value) and closes rows.
func scanHolders(rows pgx.Rows) ([]engine.Holder, error) {
	defer rows.Close()
	var out []engine.Holder
	for rows.Next() {
		var (
			mode int
			h    engine.Holder
		)
		if err := rows.Scan(&mode, &h.Token, &h.Value); err != nil {
			return nil, err
		}
		h.Mode = engine.Exclusive
		if mode == 1 {
			h.Mode = engine.Shared
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

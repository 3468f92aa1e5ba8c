package mysql

import (
	"context"
	"database/sql"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Inspector = (*Engine)(nil)

// Holders returns the leases that hold key now, in grant order; see
// engine.Inspector. With the lease strategy it is one SELECT over the key's
// row and its reader rows, listing only those unexpired by the server's
// NOW(6). With the session strategy it reads the row of the key's lock
// name in "<table>_names", if its connection holds the name now
// (IS_USED_LOCK) and it names the key. It returns engine.ErrClosed after
// Close. A session engine without holder records (WithHolderRecords(false))
// returns an error wrapping errors.ErrUnsupported.
func (e *Engine) Holders(ctx context.Context, key string) ([]engine.Holder, error) {
	if e.noRecords() {
		if err := engine.CheckKey(key, MaxKeyLen); err != nil {
			return nil, err
		}
		return nil, e.errNoRecords("holders")
	}
	return e.core.Holders(ctx, key, e.Limits().MaxKeyLen, e.readHolders)
}

// readHolders runs the holders query of the engine's strategy. The row
// strategy's records are never committed, so it reads them in a READ
// UNCOMMITTED transaction: they exist exactly as long as their holders'
// transactions, which hold the locks.
func (e *Engine) readHolders(ctx context.Context, key string) ([]engine.Holder, error) {
	if e.cfg.strategy == StrategySession {
		rows, err := e.db.QueryContext(ctx, e.q.sessHolders, lockName(e.cfg.table, key), key)
		if err != nil {
			return nil, err
		}
		return scanHolders(rows)
	}
	if e.cfg.strategy == StrategyLease {
		rows, err := e.db.QueryContext(ctx, e.q.holders, key, key)
		if err != nil {
			return nil, err
		}
		return scanHolders(rows)
	}
	tx, err := e.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadUncommitted, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, e.q.rowHolders, key, key)
	if err != nil {
		return nil, err
	}
	return scanHolders(rows)
}

// scanHolders reads rows of (mode, token, value) and closes rows.
func scanHolders(rows *sql.Rows) ([]engine.Holder, error) {
	defer rows.Close()
	var out []engine.Holder
	for rows.Next() {
		var (
			mode  int
			h     engine.Holder
			value sql.RawBytes
		)
		if err := rows.Scan(&mode, &h.Token, &value); err != nil {
			return nil, err
		}
		h.Mode, h.Value = engine.Exclusive, string(value)
		if mode == 1 {
			h.Mode = engine.Shared
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

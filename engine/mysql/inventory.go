package mysql

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Lister = (*Engine)(nil)

// listSlack is how many rows beyond limit+1 List reads: room for the
// readers of the keys (a variable so that a test can cut a key short).
var listSlack = engine.MaxLimit

// List returns the keys held under prefix; see engine.Lister. It is one
// statement, a range on the primary keys (lock_key) of the lock table and
// the readers table, `lock_key >= prefix AND lock_key < the prefix's
// successor` (no range for engine.AllKeys), ordered by key and token,
// with LIMIT limit + engine.MaxLimit + 2 rows: enough for limit+1 keys
// unless some keys have more readers than a semaphore's permits; when all
// of them come back, the last key read (perhaps not whole) is dropped and
// More is set. With
// the lease strategy it lists only leases unexpired by the server's
// NOW(6), and Expires is the server's expires_at (taken as an interval
// from NOW(6), so the server's time zone does not matter). With the row
// strategy it reads the holders' uncommitted records in a READ
// UNCOMMITTED transaction, as Holders does, without Expires. With the
// session strategy it is one statement over "<table>_names" (one row per
// lock name granted since the server started and not swept by Migrate,
// read whole: the MEMORY table's hash index has no order), listing the
// rows whose connection holds their lock name now. Waiters is -1: waiters poll, or wait inside
// InnoDB or GET_LOCK, where nothing counts them.
// It returns engine.ErrClosed after Close. A session engine without holder
// records (WithHolderRecords(false)) returns an error wrapping
// errors.ErrUnsupported.
func (e *Engine) List(ctx context.Context, prefix string, limit int) (engine.Inventory, error) {
	prefix, limit, err := engine.CheckList(prefix, limit, e.Limits().MaxKeyLen)
	if err != nil {
		return engine.Inventory{}, err
	}
	if e.noRecords() {
		return engine.Inventory{}, e.errNoRecords("list")
	}
	if err := e.frame.Enter(ctx, nil); err != nil {
		if errors.Is(err, engine.ErrClosed) {
			return engine.Inventory{}, err
		}
		return engine.Inventory{}, ctx.Err()
	}
	defer e.frame.Exit()
	qctx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
	defer cancel()
	rows := limit + listSlack + 1
	keys, full, err := e.readList(qctx, prefix, rows)
	if err != nil {
		return engine.Inventory{}, e.opErr(ctx, "list", prefix, err)
	}
	if full && len(keys) > 0 {
		keys = keys[:len(keys)-1]
	}
	return engine.Collect(keys, prefix, limit, full), nil
}

// readList runs the list statement of the engine's strategy for rows rows
// and one more; full reports that the one more came back, so the last key
// returned may lack holders.
func (e *Engine) readList(ctx context.Context, prefix string, rows int) ([]engine.HeldKey, bool, error) {
	t, r := "`"+e.cfg.table+"`", "`"+e.cfg.table+"_readers`"
	where, args := "", []any{}
	if prefix != "" {
		where = " AND `lock_key` >= ?"
		args = append(args, []byte(prefix))
		if end, ok := engine.PrefixEnd(prefix); ok {
			where += " AND `lock_key` < ?"
			args = append(args, []byte(end))
		}
	}
	if e.cfg.strategy == StrategySession {
		res, err := e.db.QueryContext(ctx, e.q.sessList+where+" ORDER BY 1, 3 LIMIT ?", append(args, rows+1)...)
		if err != nil {
			return nil, false, err
		}
		return scanList(res, rows+1)
	}
	alive, left := " AND `expires_at` > NOW(6)", "TIMESTAMPDIFF(MICROSECOND, NOW(6), `expires_at`)"
	if e.cfg.strategy == StrategyRow {
		alive, left = "", "NULL"
	}
	q := "SELECT `lock_key`, 0, `version`, `value`, " + left + " FROM " + t + " WHERE `owner` IS NOT NULL" +
		alive + where + " UNION ALL SELECT `lock_key`, 1, `version`, `value`, " + left + " FROM " + r +
		" WHERE TRUE" + alive + where + " ORDER BY 1, 3 LIMIT ?"
	args = append(append(args, args...), rows+1)
	if e.cfg.strategy == StrategyLease {
		res, err := e.db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, false, err
		}
		return scanList(res, rows+1)
	}
	tx, err := e.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadUncommitted, ReadOnly: true})
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, false, err
	}
	return scanList(res, rows+1)
}

// scanList groups rows of (key, mode, token, value, µs left) by key and
// closes rows; full reports that there were max of them.
func scanList(rows *sql.Rows, max int) ([]engine.HeldKey, bool, error) {
	defer rows.Close()
	now := time.Now()
	var out []engine.HeldKey
	n := 0
	for rows.Next() {
		var (
			key, value []byte
			mode       int
			h          engine.ListedHolder
			left       sql.NullInt64
		)
		if err := rows.Scan(&key, &mode, &h.Token, &value, &left); err != nil {
			return nil, false, err
		}
		n++
		h.Mode, h.Value = engine.Exclusive, string(value)
		if mode == 1 {
			h.Mode = engine.Shared
		}
		if left.Valid {
			h.Expires = now.Add(time.Duration(left.Int64) * time.Microsecond)
		}
		if len(out) == 0 || out[len(out)-1].Key != string(key) {
			out = append(out, engine.HeldKey{Key: string(key), Waiters: -1})
		}
		last := &out[len(out)-1]
		last.Holders = append(last.Holders, h)
	}
	return out, n == max, rows.Err()
}

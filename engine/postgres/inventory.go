package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Lister = (*Engine)(nil)

// listSlack is how many rows beyond limit+1 List reads: room for the
// readers of the keys (a variable so that a test can cut a key short).
var listSlack = engine.MaxLimit

// List returns the keys held under prefix; see engine.Lister. With the
// lease strategy it is one statement, a range on the primary keys
// (lock_key, COLLATE "C") of the lock table and the readers table,
// `lock_key >= prefix AND lock_key < engine.PrefixEnd(prefix)` (no range
// for engine.AllKeys), listing only leases unexpired by the server's
// now(), with Expires from expires_at (as an interval from now(), so
// clocks do not matter). With the session strategy it is two: one that
// reads the exclusive holder records of "<table>_fences" that pg_locks
// (read once) shows held, joined on the lock id's index, and the same
// range on the shared holders' table, then one check of the rows found
// against pg_locks, as Holders makes, so that the row of a session that
// ended without a release is not listed; a session lease has no Expires. Either reads at most limit + engine.MaxLimit + 2 rows: when all
// of them come back, the last key read (perhaps not whole) is dropped and
// More is set. Waiters is -1. It returns engine.ErrClosed after Close.
func (e *Engine) List(ctx context.Context, prefix string, limit int) (engine.Inventory, error) {
	prefix, limit, err := engine.CheckList(prefix, limit, e.Limits().MaxKeyLen)
	if err != nil {
		return engine.Inventory{}, err
	}
	if e.cfg.strategy != StrategyLease && e.cfg.strategy != StrategySession {
		return engine.Inventory{}, fmt.Errorf("postgres: list with strategy %q: %w", e.cfg.strategy,
			errors.ErrUnsupported)
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
	var hs []listRow
	if e.cfg.strategy == StrategyLease {
		hs, err = e.listLease(qctx, prefix, rows+1)
	} else {
		hs, err = e.listSession(qctx, prefix, rows+1)
	}
	if err != nil {
		return engine.Inventory{}, e.opErr(ctx, "list", prefix, err)
	}
	keys := group(hs)
	full := len(hs) > rows
	if full && len(keys) > 0 {
		keys = keys[:len(keys)-1]
	}
	return engine.Collect(keys, prefix, limit, full), nil
}

// listRow is one holder row of a listing.
type listRow struct {
	key  string
	h    engine.ListedHolder
	pid  int32 // the session strategy's holder backend
	live bool  // the session strategy: its backend holds the key
}

// rangeWhere returns the condition on lock_key for prefix, with its
// arguments numbered from $1.
func rangeWhere(prefix string) (string, []any) {
	if prefix == "" {
		return "TRUE", nil
	}
	if end, ok := engine.PrefixEnd(prefix); ok {
		return "lock_key >= $1 AND lock_key < $2", []any{prefix, end}
	}
	return "lock_key >= $1", []any{prefix}
}

// listLease reads at most n holder rows of the lease strategy.
func (e *Engine) listLease(ctx context.Context, prefix string, n int) ([]listRow, error) {
	t, r := quote(e.cfg.table), quote(e.cfg.table+"_readers")
	where, args := rangeWhere(prefix)
	left := "(extract(epoch FROM expires_at - now()) * 1000000)::bigint"
	q := "SELECT lock_key, 0::int, version, coalesce(value, ''), " + left + " FROM " + t +
		" WHERE owner IS NOT NULL AND expires_at > now() AND " + where +
		" UNION ALL SELECT lock_key, 1, version, coalesce(value, ''), " + left + " FROM " + r +
		" WHERE expires_at > now() AND " + where + " ORDER BY 1, 3 LIMIT " + strconv.Itoa(n)
	rows, err := e.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (listRow, error) {
		var (
			lr   listRow
			mode int
			us   int64
		)
		err := row.Scan(&lr.key, &mode, &lr.h.Token, &lr.h.Value, &us)
		lr.h.Mode, lr.h.Expires, lr.live = modeOf(mode), now.Add(time.Duration(us)*time.Microsecond), true
		return lr, err
	})
}

// modeOf maps the mode column (0 exclusive, 1 shared) to engine.Mode.
func modeOf(mode int) engine.Mode {
	if mode == 1 {
		return engine.Shared
	}
	return engine.Exclusive
}

// group gathers the live rows, ordered by key, into HeldKeys.
func group(rows []listRow) []engine.HeldKey {
	var out []engine.HeldKey
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].Key != r.key {
			out = append(out, engine.HeldKey{Key: r.key, Waiters: -1})
		}
		if r.live {
			out[len(out)-1].Holders = append(out[len(out)-1].Holders, r.h)
		}
	}
	return out
}

package postgres

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// listSession reads at most n holder rows of the session strategy: the
// exclusive holders recorded in "<table>_fences" whose backend holds the
// lock exclusively now (pg_locks read once, joined on pid and lock id: a
// key's row keeps its last holder after the release), and the shared ones
// of "<table>_held" (one row per shared lease, deleted at release); then
// it marks those whose backend holds the key's advisory lock now.
func (e *Engine) listSession(ctx context.Context, prefix string, n int) ([]listRow, error) {
	where, args := rangeWhere(prefix)
	q := "WITH lk AS MATERIALIZED (SELECT l.pid, (l.classid::bigint << 32) | l.objid::bigint AS id " +
		"FROM " + advisoryHeld + " AND l.mode = 'ExclusiveLock') " +
		"SELECT lock_key, mode::int, token, coalesce(value, ''), pid FROM (" +
		"SELECT f.lock_key, f.mode, f.token, f.value, f.pid FROM lk JOIN " + quote(e.cfg.table+"_fences") +
		" AS f ON f.lock_id = lk.id AND f.pid = lk.pid WHERE " + latestOf(quote(e.cfg.table+"_fences"), "f") +
		" AND " + where +
		" UNION ALL SELECT lock_key, mode, token, value, pid FROM " + quote(e.cfg.table+"_held") +
		" WHERE " + where + ") AS u ORDER BY lock_key, token LIMIT " + strconv.Itoa(n)
	rows, err := e.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (listRow, error) {
		var (
			lr   listRow
			mode int
		)
		err := row.Scan(&lr.key, &mode, &lr.h.Token, &lr.h.Value, &lr.pid)
		lr.h.Mode = modeOf(mode)
		return lr, err
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	pids := make([]int32, len(out))
	classids, objids := make([]int64, len(out)), make([]int64, len(out))
	for i, r := range out {
		pids[i] = r.pid
		classids[i], objids[i] = lockParts(e.cfg.hash(r.key))
	}
	live, err := e.pool.Query(ctx, "SELECT c.i FROM unnest($1::int[], $2::bigint[], $3::bigint[]) "+
		"WITH ORDINALITY AS c(pid, classid, objid, i) WHERE EXISTS (SELECT 1 FROM "+advisoryHeld+
		" AND l.pid = c.pid AND l.classid::bigint = c.classid AND l.objid::bigint = c.objid)", pids, classids, objids)
	if err != nil {
		return nil, err
	}
	idx, err := pgx.CollectRows(live, pgx.RowTo[int64])
	for _, i := range idx {
		out[i-1].live = true
	}
	return out, err
}

package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/cerberus-go/cerberus/engine"
)

// leaseSQL is the lease strategy's dialect: the statements that the shared
// lease algorithm (engine/internal/sqlcore) sends to PostgreSQL. A lease
// is the key's row (exclusive) or a reader row (shared) that names its
// owner value until it is cleared or expires on the server's clock, now().
type leaseSQL struct{ e *Engine }

// Transient is transient.
func (leaseSQL) Transient(err error) bool { return transient(err) }

// OpErr is the engine's opErr.
func (d leaseSQL) OpErr(ctx context.Context, op, key string, err error) error {
	return d.e.opErr(ctx, op, key, err)
}

// Grant makes one attempt: one batch of statements, sent in one round trip
// and run as one transaction. The first statement (lockRow) locks the
// key's row, creating it if need be; the statements after it see every
// grant of the key that committed before. It needs no known row.
//
// An exclusive grant then sets the row's owner, value, expiry and version
// if no unexpired writer or reader holds the key. A shared grant clears
// the key's expired reader rows, adds its own with the row's next version
// if no unexpired writer holds the key (and, for a counted request, fewer
// than Limit unexpired readers do), and bumps the row's version to it.
func (d leaseSQL) Grant(ctx context.Context, req engine.Request, owner string,
	_ *bool) (uint64, bool, error) {
	q := &d.e.q
	ttl := req.TTL.Microseconds()
	b := &pgx.Batch{}
	b.Queue(q.lockRow, req.Key)
	if req.Mode == engine.Shared {
		b.Queue(q.sharedTidy, req.Key)
		b.Queue(q.sharedAdd, req.Key, owner, ttl, req.Value, req.Limit)
		b.Queue(q.sharedBump, req.Key, owner)
	} else {
		b.Queue(q.grant, req.Key, owner, ttl, req.Value)
	}
	br := d.e.pool.SendBatch(ctx, b)
	token, ok, err := readGrant(br, b.Len()-1, req.Mode == engine.Shared)
	if cerr := br.Close(); err == nil && cerr != nil {
		return 0, false, cerr
	}
	return token, ok, err
}

// readGrant reads the results of a grant batch: first the statements
// before the grant's (n of them), then the grant's RETURNING row, if any.
func readGrant(br pgx.BatchResults, n int, shared bool) (uint64, bool, error) {
	if shared {
		n-- // the bump comes after the reader row
	}
	for range n {
		if _, err := br.Exec(); err != nil {
			return 0, false, err
		}
	}
	var token uint64
	err := br.QueryRow().Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if shared {
		if _, err := br.Exec(); err != nil {
			return 0, false, err
		}
	}
	return token, true, nil
}

// Undo clears the row (or reader row) that names owner.
func (d leaseSQL) Undo(ctx context.Context, req engine.Request, owner string) {
	q := d.e.q.undo
	if req.Mode == engine.Shared {
		q = d.e.q.readerUndo
	}
	_, _ = d.e.pool.Exec(ctx, q, req.Key, owner)
}

// Release clears the row (or reader row) with a statement conditional on
// its owner, version and expiry.
func (d leaseSQL) Release(ctx context.Context, mode engine.Mode, key, owner string,
	token uint64) (bool, error) {
	q := d.e.q.release
	if mode == engine.Shared {
		q = d.e.q.readerRelease
	}
	tag, err := d.e.pool.Exec(ctx, q, key, owner, int64(token))
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Renew renews with one UPDATE, whose RETURNING clause names the owners it
// still found.
func (d leaseSQL) Renew(ctx context.Context, shared bool, keys, owners []string) (map[string]bool, error) {
	q := d.e.q.renew
	if shared {
		q = d.e.q.readerRenew
	}
	rows, err := d.e.pool.Query(ctx, q, keys, owners)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	alive := make(map[string]bool, len(owners))
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			return nil, err
		}
		alive[o] = true
	}
	return alive, rows.Err()
}

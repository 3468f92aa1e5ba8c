package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
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
// Either is refused while a ticket that blocks it is ahead of a's (see
// sqlcore.Attempt); a grant made with a ticket deletes it with a last
// statement in the same transaction.
func (d leaseSQL) Grant(ctx context.Context, req engine.Request, owner string,
	a *sqlcore.Attempt) (uint64, bool, error) {
	q := &d.e.q
	ttl := req.TTL.Microseconds()
	b := &pgx.Batch{}
	b.Queue(q.lockRow, req.Key)
	if req.Mode == engine.Shared {
		b.Queue(q.sharedTidy, req.Key)
		b.Queue(q.sharedAdd, req.Key, owner, ttl, req.Value, req.Limit, a.Bound(), sqlcore.BlockedByAll(req))
		b.Queue(q.sharedBump, req.Key, owner)
	} else {
		b.Queue(q.grant, req.Key, owner, ttl, req.Value, a.Bound(), sqlcore.BlockedByAll(req))
	}
	if a.Ticket != 0 {
		b.Queue(q.ticketDone, req.Key, owner, int64(a.Ticket))
	}
	br := d.e.pool.SendBatch(ctx, b)
	token, ok, err := readGrant(br, req.Mode == engine.Shared, a.Ticket != 0)
	if cerr := br.Close(); err == nil && cerr != nil {
		return 0, false, cerr
	}
	return token, ok, err
}

// readGrant reads the results of a grant batch: first the statements
// before the grant's (lockRow, and sharedTidy if shared), then the
// grant's RETURNING row, if any, then the bump if shared and the ticket's
// deletion if queued.
func readGrant(br pgx.BatchResults, shared, queued bool) (uint64, bool, error) {
	n := 1
	if shared {
		n++
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
	if queued {
		if _, err := br.Exec(); err != nil {
			return 0, false, err
		}
	}
	return token, true, nil
}

// Enqueue clears the key's expired tickets and inserts one, in one
// statement; its identity number is the ticket.
func (d leaseSQL) Enqueue(ctx context.Context, req engine.Request, owner string,
	ttl time.Duration) (uint64, error) {
	var t int64
	err := d.e.pool.QueryRow(ctx, d.e.q.enqueue, req.Key, owner, sqlcore.QueueMode(req),
		ttl.Microseconds()).Scan(&t)
	return uint64(t), err
}

// Queued refreshes the engine's tickets on the key, if asked, and reads the
// waiter's place, in one statement.
func (d leaseSQL) Queued(ctx context.Context, req engine.Request, ticket uint64, prefix string,
	ttl time.Duration, refresh bool) (int, bool, error) {
	var ahead, mine int
	err := d.e.pool.QueryRow(ctx, d.e.q.queued, req.Key, int64(ticket), sqlcore.BlockedByAll(req),
		ttl.Microseconds(), refresh, prefix).Scan(&ahead, &mine)
	return ahead, mine == 1, err
}

// Dequeue deletes the ticket of key and owner.
func (d leaseSQL) Dequeue(ctx context.Context, key, owner string) {
	_, _ = d.e.pool.Exec(ctx, d.e.q.dequeue, key, owner)
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

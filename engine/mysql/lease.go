package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
)

// leaseSQL is the lease strategy's dialect: the statements that the shared
// lease algorithm (engine/internal/sqlcore) sends to MySQL. A lease is a
// row (exclusive) or a reader row (shared) that names its owner value until
// it is cleared or expires on the server's clock, NOW(6).
type leaseSQL struct{ e *Engine }

// Transient reports server errors after which a grant attempt is simply
// repeated: InnoDB chose this statement as a deadlock victim or it waited
// too long for a row lock.
func (leaseSQL) Transient(err error) bool {
	n := errNumber(err)
	return n == errDeadlock || n == errLockWaitTimeout
}

// OpErr is the engine's opErr.
func (d leaseSQL) OpErr(ctx context.Context, op, key string, err error) error {
	return d.e.opErr(ctx, op, key, err)
}

// Grant makes one attempt. a.Known records that the key's row is known
// to exist, which saves the INSERT on later attempts. An exclusive grant
// made with a ticket deletes it in a second statement; if that fails, the
// attempt fails (and the core undoes the grant and the ticket).
func (d leaseSQL) Grant(ctx context.Context, req engine.Request, owner string,
	a *sqlcore.Attempt) (uint64, bool, error) {
	e := d.e
	ttl := req.TTL.Microseconds()
	if req.Mode == engine.Shared {
		return e.grantShared(ctx, req, owner, ttl, a)
	}
	res, err := e.db.ExecContext(ctx, e.q.grant, owner, ttl, req.Value, ttl, req.Key, a.Bound(),
		sqlcore.BlockedByAll(req))
	if err != nil {
		return 0, false, err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		id, err := res.LastInsertId()
		if err == nil && a.Ticket != 0 {
			_, err = e.db.ExecContext(ctx, e.q.ticketDone, a.Ticket)
		}
		return uint64(id), err == nil, err
	}
	if a.Known {
		return 0, false, nil
	}
	res, err = e.db.ExecContext(ctx, e.q.insert, req.Key, owner, ttl, req.Value, ttl)
	if err != nil {
		return 0, false, err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return 1, true, nil
	}
	a.Known = true
	return 0, false, nil
}

// grantShared is one shared attempt: a short transaction that bumps the key
// row's version if no unexpired writer holds it, clears readers that
// expired and adds this reader's row. The bump locks the key row until the
// commit, so the shared grants of a key run one at a time; a counted one
// (req.Limit above 0) adds its row only while fewer than Limit unexpired
// reader rows of the key exist, counted in the same statement
// (readerAddCounted). A grant made with a ticket deletes it in the same
// transaction.
func (e *Engine) grantShared(ctx context.Context, req engine.Request, owner string,
	ttl int64, a *sqlcore.Attempt) (uint64, bool, error) {
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = tx.Rollback() }()
	token, ok, err := e.bumpShared(ctx, tx, req, a)
	if !ok || err != nil {
		return 0, false, err
	}
	if _, err := tx.ExecContext(ctx, e.q.readerTidy, req.Key); err != nil {
		return 0, false, err
	}
	if req.Limit > 0 {
		res, err := tx.ExecContext(ctx, e.q.readerAddCounted, req.Key, owner, token, ttl, ttl,
			req.Value, req.Key, req.Limit)
		if err != nil {
			return 0, false, err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return 0, false, nil // every permit is held
		}
	} else if _, err := tx.ExecContext(ctx, e.q.readerAdd, req.Key, owner, token, ttl, ttl,
		req.Value); err != nil {
		return 0, false, err
	}
	if a.Ticket != 0 {
		if _, err := tx.ExecContext(ctx, e.q.ticketDone, a.Ticket); err != nil {
			return 0, false, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, false, err
	}
	return token, true, nil
}

// bumpShared raises the key row's version for a shared grant of req, in
// tx, if no unexpired writer holds the key and no ticket that blocks req
// is ahead of a's, and returns the new version. A key with no row yet gets
// one with version 1.
func (e *Engine) bumpShared(ctx context.Context, tx *sql.Tx, req engine.Request,
	a *sqlcore.Attempt) (uint64, bool, error) {
	key := req.Key
	res, err := tx.ExecContext(ctx, e.q.sharedGrant, key, a.Bound(), sqlcore.BlockedByAll(req))
	if err != nil {
		return 0, false, err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		id, err := res.LastInsertId()
		return uint64(id), err == nil, err
	}
	res, err = tx.ExecContext(ctx, e.q.sharedInsert, key)
	if err != nil {
		return 0, false, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return 0, false, nil // held by a writer
	}
	return 1, true, nil
}

// Enqueue clears the key's expired tickets (best effort) and inserts one;
// its AUTO_INCREMENT number is the ticket.
func (d leaseSQL) Enqueue(ctx context.Context, req engine.Request, owner string,
	ttl time.Duration) (uint64, error) {
	e := d.e
	_, _ = e.db.ExecContext(ctx, e.q.queueTidy, req.Key)
	res, err := e.db.ExecContext(ctx, e.q.enqueue, req.Key, owner, sqlcore.QueueMode(req), ttl.Microseconds())
	if err != nil {
		return 0, err
	}
	id, err := res.LastInsertId()
	return uint64(id), err
}

// Queued refreshes the engine's tickets on the key with one UPDATE, if
// asked, and reads the waiter's place with one SELECT.
func (d leaseSQL) Queued(ctx context.Context, req engine.Request, ticket uint64, prefix string,
	ttl time.Duration, refresh bool) (int, bool, error) {
	e := d.e
	if refresh {
		if _, err := e.db.ExecContext(ctx, e.q.queueRefresh, ttl.Microseconds(), req.Key, prefix); err != nil {
			return 0, false, err
		}
	}
	var ahead, mine int
	err := e.db.QueryRowContext(ctx, e.q.queuePlace, ticket, sqlcore.BlockedByAll(req), ticket, req.Key,
		ticket).Scan(&ahead, &mine)
	return ahead, mine == 1, err
}

// Dequeue deletes the ticket of key and owner.
func (d leaseSQL) Dequeue(ctx context.Context, key, owner string) {
	_, _ = d.e.db.ExecContext(ctx, d.e.q.dequeue, key, owner)
}

// Undo clears the row (or reader row) that names owner.
func (d leaseSQL) Undo(ctx context.Context, req engine.Request, owner string) {
	q := d.e.q.undo
	if req.Mode == engine.Shared {
		q = d.e.q.readerUndo
	}
	_, _ = d.e.db.ExecContext(ctx, q, req.Key, owner)
}

// Release clears the row (or reader row) with a statement conditional on
// its owner, version and expiry.
func (d leaseSQL) Release(ctx context.Context, mode engine.Mode, key, owner string,
	token uint64) (bool, error) {
	q := d.e.q.release
	if mode == engine.Shared {
		q = d.e.q.readerRelease
	}
	res, err := d.e.db.ExecContext(ctx, q, key, owner, token)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Renew renews with one UPDATE. Only when it changed fewer rows than it
// named does a SELECT find out which leases it renewed.
func (d leaseSQL) Renew(ctx context.Context, shared bool, keys, owners []string) (map[string]bool, error) {
	e := d.e
	renewQ, aliveQ := e.q.renew, e.q.alive
	if shared {
		renewQ, aliveQ = e.q.readerRenew, e.q.readerAlive
	}
	args := make([]any, 0, len(keys)+len(owners))
	for _, k := range keys {
		args = append(args, k)
	}
	for _, o := range owners {
		args = append(args, o)
	}
	ph := placeholders(len(keys))
	res, err := e.db.ExecContext(ctx, fmt.Sprintf(renewQ, ph, ph), args...)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err == nil && int(n) == len(keys) {
		return nil, nil // every one
	}
	return e.aliveOwners(ctx, fmt.Sprintf(aliveQ, ph, ph), args)
}

// aliveOwners runs a SELECT of owners and returns them.
func (e *Engine) aliveOwners(ctx context.Context, q string, args []any) (map[string]bool, error) {
	rows, err := e.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	alive := make(map[string]bool)
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			return nil, err
		}
		alive[o] = true
	}
	return alive, rows.Err()
}

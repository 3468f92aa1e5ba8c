package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
)

var _ engine.Releaser = (*Engine)(nil)

// ForceRelease frees key whoever holds it, with the lease strategy; see
// engine.Releaser and the package documentation ("Force release"). The
// session strategy has none yet: it returns an error wrapping
// engine.ErrInvalidRequest, before any I/O.
func (e *Engine) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if e.cfg.strategy != StrategyLease {
		return nil, fmt.Errorf("%w: postgres: force release needs the lease strategy", engine.ErrInvalidRequest)
	}
	return e.core.ForceRelease(ctx, key, MaxKeyLen)
}

// Free runs ForceRelease's transaction (see queries.release) as one batch:
// one round trip.
func (d leaseSQL) Free(ctx context.Context, key string) ([]sqlcore.Freed, error) {
	b := &pgx.Batch{}
	b.Queue(d.e.q.freeLock, key)
	b.Queue(d.e.q.free, key)
	br := d.e.pool.SendBatch(ctx, b)
	freed, err := readFreed(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		return nil, cerr
	}
	return freed, err
}

// readFreed reads the results of Free's batch.
func readFreed(br pgx.BatchResults) ([]sqlcore.Freed, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var freed []sqlcore.Freed
	for rows.Next() {
		var f sqlcore.Freed
		var mode int
		var token int64
		if err := rows.Scan(&mode, &f.Owner, &token, &f.Value); err != nil {
			return nil, err
		}
		f.Mode, f.Token = engine.Exclusive, uint64(token)
		if mode == 1 {
			f.Mode = engine.Shared
		}
		freed = append(freed, f)
	}
	return freed, rows.Err()
}

// Released reads the tombstones of owners with one SELECT.
func (d leaseSQL) Released(ctx context.Context, owners []string) (map[string]bool, error) {
	rows, err := d.e.pool.Query(ctx, d.e.q.released, owners)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]bool, len(owners))
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			return nil, err
		}
		out[o] = true
	}
	return out, rows.Err()
}

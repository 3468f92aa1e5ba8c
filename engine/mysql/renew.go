package mysql

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// renewBatch is the most leases one renewal statement names: each
// statement is one commit, so one log flush, however many rows it renews.
const renewBatch = 2000

// renewParallel is how many renewal statements run at once.
const renewParallel = 4

// wakeRenewal tells the renewal loop that a renewed lease was added, so it
// can shorten its interval.
func (e *Engine) wakeRenewal() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// renewInterval is a third of the shortest TTL of the renewed leases, or 0
// if there are none.
func (e *Engine) renewInterval() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	var d time.Duration
	for x := range e.frame.AllLocked() {
		if l, ok := x.(*lease); ok && l.renew && (d == 0 || l.ttl/3 < d) {
			d = l.ttl / 3
		}
	}
	return d
}

// renewAll renews every renewed lease of the engine, the ones whose
// validity runs out first first, renewParallel statements at a time, and
// returns how many it renewed and the earliest end of validity of those
// still held (for engine.Pace).
func (e *Engine) renewAll() (int, time.Time) {
	var writers, readers []*lease
	e.mu.Lock()
	for x := range e.frame.AllLocked() {
		l, ok := x.(*lease)
		if !ok || !l.renew {
			continue
		}
		if l.mode == engine.Shared {
			readers = append(readers, l)
		} else {
			writers = append(writers, l)
		}
	}
	e.mu.Unlock()
	byValidity := func(a, b *lease) int { return a.validSince().Compare(b.validSince()) }
	slices.SortFunc(writers, byValidity)
	slices.SortFunc(readers, byValidity)
	queries := [][2]string{{e.q.renew, e.q.alive}, {e.q.readerRenew, e.q.readerAlive}}
	engine.InBatches(renewBatch, renewParallel, [][]*lease{writers, readers}, func(set int, batch []*lease) {
		e.renewSome(batch, queries[set][0], queries[set][1])
	})
	return len(writers) + len(readers), validUntil(writers, readers)
}

// validUntil is the earliest end of validity of the leases of sets that
// are still held and renewed (not ended, no release on the wire), or zero
// if none is.
func validUntil(sets ...[]*lease) time.Time {
	var first time.Time
	for _, ls := range sets {
		for _, l := range ls {
			l.mu.Lock()
			v, releasing := l.validFrom.Add(life(l.ttl)), l.releasing
			l.mu.Unlock()
			if releasing || l.sig.Closed() {
				continue
			}
			if first.IsZero() || v.Before(first) {
				first = v
			}
		}
	}
	return first
}

// validSince is when the lease's current validity began.
func (l *lease) validSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validFrom
}

// renewSome renews one batch with one UPDATE. Only when it changed fewer
// rows than it named does a SELECT find out which leases were lost.
func (e *Engine) renewSome(batch []*lease, renewQ, aliveQ string) {
	// The statement may not outlast the earliest validity in the batch: a
	// renewal still in flight when the server may have expired a row
	// counts as failed, so that lease's Done closes in time.
	deadline := time.Now().Add(e.cfg.opTimeout)
	for _, l := range batch {
		l.mu.Lock()
		if v := l.validFrom.Add(life(l.ttl)); v.Before(deadline) {
			deadline = v
		}
		l.mu.Unlock()
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	args := make([]any, 0, 2*len(batch))
	for _, l := range batch {
		args = append(args, l.key)
	}
	for _, l := range batch {
		args = append(args, l.owner)
	}
	ph := placeholders(len(batch))
	start := time.Now()
	res, err := e.db.ExecContext(ctx, fmt.Sprintf(renewQ, ph, ph), args...)
	if err != nil {
		e.renewFailed(batch)
		return
	}
	if n, err := res.RowsAffected(); err == nil && int(n) == len(batch) {
		e.renewed(batch, start)
		return
	}
	alive, err := e.aliveOwners(ctx, fmt.Sprintf(aliveQ, ph, ph), args)
	if err != nil {
		e.renewFailed(batch)
		return
	}
	var ok []*lease
	for _, l := range batch {
		if alive[l.owner] {
			ok = append(ok, l)
			continue
		}
		l.mu.Lock()
		releasing := l.releasing
		l.mu.Unlock()
		if !releasing {
			l.end(engine.ErrLeaseLost, false)
		}
	}
	e.renewed(ok, start)
}

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

func (e *Engine) renewed(batch []*lease, start time.Time) {
	for _, l := range batch {
		l.mu.Lock()
		l.validFrom = start
		l.mu.Unlock()
	}
}

// renewFailed ends the leases of a batch that could not be renewed once
// their validity runs out: now, or, if some is left, when it does unless a
// later renewal succeeds first. The next renewal round may come after that.
func (e *Engine) renewFailed(batch []*lease) {
	for _, l := range batch {
		l.mu.Lock()
		from, releasing := l.validFrom, l.releasing
		l.mu.Unlock()
		if releasing {
			continue
		}
		left := life(l.ttl) - time.Since(from)
		if left <= 0 {
			l.end(engine.ErrLeaseLost, false)
			continue
		}
		time.AfterFunc(left, func() {
			l.mu.Lock()
			stale := l.validFrom.Equal(from) && !l.releasing
			l.mu.Unlock()
			if stale {
				l.end(engine.ErrLeaseLost, false)
			}
		})
	}
}

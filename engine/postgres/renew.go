package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// renewBatch is the most leases one renewal statement names: each
// statement is one commit, so one WAL flush, however many rows it renews.
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

// renewLoop is the lease strategy's single renewal goroutine. Every
// interval (a third of the shortest TTL among renewed leases) it sends one
// UPDATE per table and per renewBatch leases that extends every renewed
// lease of this engine by its own TTL, on the server's clock, and returns
// the owners it found. A lease the UPDATE no longer finds as ours ends
// with engine.ErrLeaseLost; so does one whose last successful renewal is a
// TTL old while the server cannot be reached.
func (e *Engine) renewLoop() {
	last := time.Now()
	idle := true
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		interval := e.renewInterval()
		if interval == 0 {
			idle = true
			select {
			case <-e.kick:
				continue
			case <-e.frame.Closing():
				return
			}
		}
		if idle {
			// The first renewed lease after a quiet spell was just granted.
			idle, last = false, time.Now()
		}
		t.Reset(max(time.Until(last.Add(interval)), 0))
		select {
		case <-t.C:
			last = time.Now()
			n := e.renewAll()
			e.pace(n, time.Since(last), interval)
		case <-e.kick:
			if !t.Stop() {
				<-t.C
			}
		case <-e.frame.Closing():
			return
		}
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
// returns how many it renewed.
func (e *Engine) renewAll() int {
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
	sem := make(chan struct{}, renewParallel)
	var wg sync.WaitGroup
	for _, set := range []struct {
		leases []*lease
		q      string
	}{{writers, e.q.renew}, {readers, e.q.readerRenew}} {
		ls := set.leases
		slices.SortFunc(ls, func(a, b *lease) int { return a.validSince().Compare(b.validSince()) })
		for len(ls) > 0 {
			n := min(len(ls), renewBatch)
			batch := ls[:n]
			ls = ls[n:]
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				e.renewSome(batch, set.q)
			}()
		}
	}
	wg.Wait()
	return len(writers) + len(readers)
}

// pace records whether the last renewal round of n leases kept up: one
// that took longer than its interval means the server cannot renew this
// many leases this often, and until a round keeps up again new grants are
// refused rather than letting held leases lapse.
func (e *Engine) pace(n int, took, interval time.Duration) {
	if took <= interval {
		e.behind.Store(nil)
		return
	}
	err := fmt.Errorf("%w: renewal is falling behind: renewing %d leases took %v, over the %v "+
		"between rounds; new leases are refused until it keeps up",
		engine.ErrUnavailable, n, took.Round(time.Millisecond), interval.Round(time.Millisecond))
	e.behind.Store(&err)
}

// validSince is when the lease's current validity began.
func (l *lease) validSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validFrom
}

// renewSome renews one batch with one UPDATE, whose RETURNING clause names
// the leases it still found.
func (e *Engine) renewSome(batch []*lease, q string) {
	// The statement may not outlast the earliest validity in the batch: a
	// renewal still in flight when the server may have expired a row
	// counts as failed, so that lease's Done closes in time.
	deadline := time.Now().Add(e.cfg.opTimeout)
	keys := make([]string, 0, len(batch))
	owners := make([]string, 0, len(batch))
	for _, l := range batch {
		l.mu.Lock()
		if v := l.validFrom.Add(life(l.ttl)); v.Before(deadline) {
			deadline = v
		}
		l.mu.Unlock()
		keys = append(keys, l.key)
		owners = append(owners, l.owner)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	alive, err := e.renewed(ctx, q, keys, owners)
	if err != nil {
		e.renewFailed(batch)
		return
	}
	for _, l := range batch {
		if alive[l.owner] {
			l.mu.Lock()
			l.validFrom = start
			l.mu.Unlock()
			continue
		}
		l.mu.Lock()
		releasing := l.releasing
		l.mu.Unlock()
		if !releasing {
			l.end(engine.ErrLeaseLost, false)
		}
	}
}

// renewed runs a renewal statement and returns the owners it renewed.
func (e *Engine) renewed(ctx context.Context, q string, keys, owners []string) (map[string]bool, error) {
	rows, err := e.pool.Query(ctx, q, keys, owners)
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

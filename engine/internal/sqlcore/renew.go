package sqlcore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// renewBatch is the most leases one renewal statement names: each
// statement is one commit, so one log flush, however many rows it renews.
const renewBatch = 2000

// renewParallel is how many renewal statements run at once.
const renewParallel = 4

// wakeRenewal tells the renewal loop that a renewed lease was added, so it
// can shorten its interval.
func (c *Core) wakeRenewal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// renewSchedule returns the renewal interval, a third of the shortest TTL
// of the renewed leases or 0 if there are none (see Core.every), and the
// earliest validity start of those that no round has renewed yet (see
// Core.fresh), for kit.RenewRounds.
func (c *Core) renewSchedule() (time.Duration, time.Time) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.every, c.fresh
}

// renewAll renews every renewed lease of the engine, the ones whose
// validity runs out first first, renewParallel statements at a time, and
// returns how many it renewed and the earliest end of validity of those
// still held (for kit.Pace). The walk under Mu only collects the leases
// (and the interval, Core.every); their validity is read after it, once
// each, so that grants are not held up behind a round.
func (c *Core) renewAll() (int, time.Time) {
	var all []*lease
	var every time.Duration
	c.Mu.Lock()
	for x := range c.Frame.AllLocked() {
		if l, ok := x.(*lease); ok && l.renew {
			all = append(all, l)
			if every == 0 || l.ttl/3 < every {
				every = l.ttl / 3
			}
		}
	}
	c.every = every
	c.fresh = time.Time{} // every lease granted so far is in this round
	c.Mu.Unlock()
	type since struct {
		l    *lease
		from time.Time
	}
	order := make([]since, len(all))
	for i, l := range all {
		order[i] = since{l, l.validSince()}
	}
	slices.SortFunc(order, func(a, b since) int { return a.from.Compare(b.from) })
	var w, r []*lease
	for _, s := range order {
		if s.l.Mode() == engine.Shared {
			r = append(r, s.l)
		} else {
			w = append(w, s.l)
		}
	}
	kit.InBatches(renewBatch, renewParallel, [][]*lease{w, r}, func(set int, batch []*lease) {
		c.renewSome(batch, set == 1)
	})
	return len(w) + len(r), validUntil(w, r)
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
			if releasing || l.Signal.Closed() {
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

// renewSome renews one batch (of reader rows if shared) with one
// Dialect.Renew, and ends the leases it no longer found, with
// engine.ErrReleasedByOperator those an operator freed (see lostErr).
func (c *Core) renewSome(batch []*lease, shared bool) {
	// The statement may not outlast the earliest validity in the batch: a
	// renewal still in flight when the server may have expired a row
	// counts as failed, so that lease's Done closes in time. A lease whose
	// validity has already run out (the round came late) is ended now and
	// not sent: it would give the whole batch a deadline already past.
	now := time.Now()
	deadline := now.Add(c.cfg.OpTimeout)
	keys := make([]string, 0, len(batch))
	owners := make([]string, 0, len(batch))
	live := batch[:0:0]
	for _, l := range batch {
		l.mu.Lock()
		v, releasing := l.validFrom.Add(life(l.ttl)), l.releasing
		l.mu.Unlock()
		if !v.After(now) {
			if !releasing {
				l.end(fmt.Errorf("%w: its validity ran out before its renewal was sent", engine.ErrLeaseLost), false)
			}
			continue
		}
		if v.Before(deadline) {
			deadline = v
		}
		live = append(live, l)
		keys = append(keys, l.Key())
		owners = append(owners, l.owner)
	}
	if batch = live; len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	alive, err := c.d.Renew(ctx, shared, keys, owners)
	if err != nil {
		renewFailed(batch)
		return
	}
	var lost []*lease
	for _, l := range batch {
		l.mu.Lock()
		if alive == nil || alive[l.owner] {
			l.validFrom = start
			l.mu.Unlock()
			continue
		}
		releasing := l.releasing
		l.mu.Unlock()
		if !releasing {
			lost = append(lost, l)
		}
	}
	if len(lost) == 0 {
		return
	}
	// A lease no longer found was released by an operator if its
	// tombstone is there: one more statement, only when leases are lost.
	why := c.lostErr(ctx, lost)
	for _, l := range lost {
		l.end(why(l), false)
	}
}

// renewFailed ends the leases of a batch that could not be renewed once
// their validity runs out: now, or, if some is left, when it does unless a
// later renewal succeeds first. The next renewal round may come after that.
func renewFailed(batch []*lease) {
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

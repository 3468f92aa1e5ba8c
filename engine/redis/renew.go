package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
)

// renewBatch caps the scripts in one renewal pipeline.
const renewBatch = 1000

// poke wakes the renewal loop so it reconsiders its next deadline.
func (e *Engine) poke() {
	select {
	case e.renewNow <- struct{}{}:
	default:
	}
}

// renewLoop is the engine's one renewal goroutine: it sleeps until the
// earliest lease is due, then renews every lease that is due (or nearly) in
// pipelines.
func (e *Engine) renewLoop() {
	defer close(e.loopDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(time.Until(e.nextDue()))
		select {
		case <-e.frame.Closing():
			return
		case <-e.renewNow:
		case <-timer.C:
			start := time.Now()
			slow := e.renewDue()
			e.pace(slow, time.Since(start))
		}
	}
}

// nextDue returns when the loop should next wake, and records it so that
// granted pokes the loop only for a lease due earlier.
func (e *Engine) nextDue() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	// An idle loop still wakes every idleWake, so that granting a lease
	// due later than that needs no poke (a goroutine switch per grant).
	next := time.Now().Add(idleWake)
	for l := range e.frame.AllLocked() {
		if l.renew && l.due.Before(next) {
			next = l.due
		}
	}
	e.wakeAt = next
	return next
}

// idleWake is the longest the renewal loop sleeps.
const idleWake = time.Second

// renewParallel is how many renewal pipelines may be in flight at once.
const renewParallel = 4

// renewDue renews the leases that are due, or within a sixth of their TTL
// of it, so that leases granted close together share a pipeline. The most
// urgent go first, in up to renewParallel pipelines at once. It reports
// whether a pipeline timed out.
func (e *Engine) renewDue() (slow bool) {
	now := time.Now()
	e.mu.Lock()
	var due []*lease
	for l := range e.frame.AllLocked() {
		if l.renew && l.due.Sub(now) <= l.ttl/6 {
			due = append(due, l)
		}
	}
	slices.SortFunc(due, func(a, b *lease) int { return a.valid.Compare(b.valid) })
	e.mu.Unlock()
	sem := make(chan struct{}, renewParallel)
	var wg sync.WaitGroup
	var timedOut atomic.Bool
	for start := 0; start < len(due); start += renewBatch {
		batch := due[start:min(start+renewBatch, len(due))]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if e.renew(batch) {
				timedOut.Store(true)
			}
		}()
	}
	wg.Wait()
	return timedOut.Load()
}

// pace records whether renewal keeps up, by kit.Pace's rule: a round
// with a pipeline that timed out, or after which some renewed lease's
// next renewal, starting when it is due and taking as long as this round
// took, would land after the lease's validity ends, means the server
// cannot keep these leases now, and until a round leaves every lease slack
// Acquire refuses new leases (see Engine.renewPace) rather than add more.
func (e *Engine) pace(slow bool, took time.Duration) {
	now := time.Now()
	n := 0
	var next, valid time.Time // of the lease with the least room
	e.mu.Lock()
	for l := range e.frame.AllLocked() {
		if !l.renew {
			continue
		}
		n++
		start := l.due
		if start.Before(now) {
			start = now
		}
		if valid.IsZero() || l.valid.Sub(start) < valid.Sub(next) {
			next, valid = start, l.valid
		}
	}
	e.mu.Unlock()
	if slow {
		e.renewPace.Unanswered(n, took)
		return
	}
	e.renewPace.Record(n, took, next, valid)
}

// renew extends a batch of leases in one pipeline. A lease whose renewal
// finds it no longer holds the key, or fails for want of the server (the
// connection refused or broken: the server may have restarted without the
// key), is lost. A renewal that only timed out (a slow server) is retried
// soon while the lease is still valid, and the lease is lost only when its
// validity runs out; renew then reports the timeout. The pipeline may not
// outlast the earliest validity in the batch: a renewal still in flight
// when the server may have expired the key counts as failed.
func (e *Engine) renew(batch []*lease) (timedOut bool) {
	sent := time.Now()
	deadline := sent.Add(e.opts.timeout)
	e.mu.Lock()
	for _, l := range batch {
		if l.valid.Before(deadline) {
			deadline = l.valid
		}
	}
	e.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmds, err := e.renewPipeline(ctx, batch)
	if hasNoScript(err) {
		loadScripts(ctx, e.c)
		cmds, _ = e.renewPipeline(ctx, batch)
	}
	var gone []*lease // found gone, or paused past expiry: ask the force-release mark why
	var causes []error
	for i, l := range batch {
		n, err := cmds[i].Int64()
		switch {
		case err != nil && isTimeout(err) && e.retryLater(l):
			timedOut = true
		case err != nil && isTimeout(err) && e.pausedPast(l):
			gone = append(gone, l)
			causes = append(causes, fmt.Errorf("%w: renewal failed: %w", engine.ErrLeaseLost, err))
		case err != nil:
			l.lost(fmt.Errorf("%w: renewal failed: %w", engine.ErrLeaseLost, err))
		case n != 1:
			gone = append(gone, l)
			causes = append(causes, fmt.Errorf("%w: renewal found the key gone or held by another", engine.ErrLeaseLost))
		default:
			e.mu.Lock()
			l.due, l.valid = sent.Add(l.ttl/3), sent.Add(l.life())
			e.mu.Unlock()
		}
	}
	e.endLost(gone, causes)
	return timedOut
}

// isTimeout reports whether err is a deadline that ran out (the engine's
// own, as a context or a socket deadline) rather than a refused or broken
// connection.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// pausedPast reports whether l's key has expired on the server even by
// the server's clock (its validity and a margin more have passed): the
// process was paused, or its timers ran very late. Only then may a lost
// lease wait for a round trip to the force-release mark: otherwise Done
// must close before the server can grant the key again.
func (e *Engine) pausedPast(l *lease) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return time.Since(l.valid) > engine.Margin(l.ttl)
}

// retryLater schedules l's renewal again soon, no later than its validity,
// and reports whether it is still valid (else it must be ended now).
func (e *Engine) retryLater(l *lease) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if !now.Before(l.valid) {
		return false
	}
	l.due = now.Add(l.ttl / 10)
	if l.valid.Before(l.due) {
		l.due = l.valid
	}
	return true
}

func (e *Engine) renewPipeline(ctx context.Context, batch []*lease) ([]*goredis.Cmd, error) {
	pipe := e.c.Pipeline()
	cmds := make([]*goredis.Cmd, len(batch))
	for i, l := range batch {
		if l.Mode() == engine.Exclusive {
			cmds[i] = renewExclusive.EvalSha(ctx, pipe, e.renewKeys(l.Key(), l.Mode()), l.id, ms(l.ttl),
				flag(l.hasValue))
		} else {
			cmds[i] = renewShared.EvalSha(ctx, pipe, e.renewKeys(l.Key(), l.Mode()), l.id, ms(l.ttl))
		}
	}
	_, err := pipe.Exec(ctx)
	return cmds, err
}

// hasNoScript reports whether err (or one of a pipeline's errors) is
// Redis's NOSCRIPT: the script cache was flushed or never filled.
func hasNoScript(err error) bool {
	return err != nil && (goredis.HasErrorPrefix(err, "NOSCRIPT") || errors.Is(err, errNoScript))
}

var errNoScript = errors.New("NOSCRIPT")

// loadScripts loads every script, for pipelines that use EVALSHA.
func loadScripts(ctx context.Context, c Client) {
	for _, s := range []*goredis.Script{acquireExclusive, acquireShared, releaseExclusive,
		releaseShared, renewExclusive, renewShared, leaveQueue, holdersScript, forceRelease} {
		_ = s.Load(ctx, c).Err()
	}
}

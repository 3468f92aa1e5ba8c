package kit

import (
	"context"
	"errors"
	"fmt"
	"github.com/cerberus-go/cerberus/engine"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// RenewRounds runs the single renewal loop of an engine that renews all
// its leases in rounds (the SQL engines: one UPDATE renews a batch of
// rows). Each round comes the interval after the start of the last one, or
// at once if the last one took longer, interval() being read again every
// time; it returns the interval (a third of the shortest renewed TTL, say)
// and since, the earliest instant from which a renewed lease that no round
// has renewed yet counts its validity (zero if none): the round comes at
// the latest the interval after since, so that a lease whose grant took
// long to answer (a first connection dialled, a wait on a row lock) or
// that woke the loop late is renewed the interval into its validity, not
// the interval after the loop learned of it. While the interval is 0
// there is nothing to renew, and the loop waits for kick, which the engine
// signals (without blocking) when it grants a renewed lease, so that the
// new lease's interval is taken into account at once. round renews what
// the engine holds and returns how many leases it renewed and the earliest
// end of validity of the renewed leases it still holds (zero if none);
// pace then records whether the next round can land in time (Pace.Record).
// When the interval falls to 0 the pace is cleared: no lease is left at
// risk, so a refusal recorded for the leases that ended ends too.
// RenewRounds returns when closing closes.
func RenewRounds(closing, kick <-chan struct{}, interval func() (every time.Duration, since time.Time),
	round func() (n int, validUntil time.Time), pace *Pace) {
	last := time.Now()
	idle := true
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		every, since := interval()
		if every == 0 {
			if !idle {
				// The renewed leases ended: none is at risk, so a
				// refusal recorded for them ends too.
				pace.Record(0, 0, time.Time{}, time.Time{})
			}
			idle = true
			select {
			case <-kick:
				continue
			case <-closing:
				return
			}
		}
		if idle {
			// The first renewed lease after a quiet spell was just granted.
			idle, last = false, time.Now()
		}
		due := last.Add(every)
		if !since.IsZero() && since.Add(every).Before(due) {
			due = since.Add(every)
		}
		t.Reset(max(time.Until(due), 0))
		select {
		case <-t.C:
			last = time.Now()
			n, validUntil := round()
			took := time.Since(last)
			// The next round starts when this one is due to, or now if
			// it is already late.
			pace.Record(n, took, last.Add(max(every, took)), validUntil)
		case <-kick:
			if !t.Stop() {
				<-t.C
			}
		case <-closing:
			return
		}
	}
}

// Pace records whether an engine's renewal keeps its leases valid, and
// refuses new grants while it does not. The rule is about the leases'
// remaining validity, not about how long a round took: after each round,
// the renewal of the lease with the least room is projected to land at
// the time its next renewal can start plus as long as this round took
// (the server answers about as fast as it just did); if that is later than
// the end of the lease's validity (which already stops a engine.Margin short of
// its TTL), the lease is at risk of expiring before its renewal lands, and
// until a round leaves every lease that slack the engine refuses new
// grants (with Err) rather than add leases that a server this slow cannot
// keep. A round slower than the interval between rounds but with validity
// to spare (a slow network that still renews every lease in time) is not
// refused: refusing then would turn latency into an outage. A round in
// which a renewal went unanswered (it timed out: Unanswered) refuses too,
// since when its renewal would land is unknown. The zero value is ready to
// use.
//
// Pace also keeps that room, for metrics (Slack).
type Pace struct {
	behind atomic.Pointer[error]
	slack  atomic.Pointer[time.Duration] // nil while no lease is renewed
}

// Record notes a round that renewed n leases in took. next and validUntil
// are those of the lease with the least room between them: when its next
// renewal can start, and when its validity (after this round) ends. A
// zero validUntil (no lease left) clears the refusal.
func (p *Pace) Record(n int, took time.Duration, next, validUntil time.Time) {
	landing := next.Add(took)
	if validUntil.IsZero() {
		p.slack.Store(nil)
	} else {
		room := validUntil.Sub(landing)
		p.slack.Store(&room)
	}
	if validUntil.IsZero() || !landing.After(validUntil) {
		p.behind.Store(nil)
		return
	}
	err := fmt.Errorf("%w: renewal is falling behind: renewing %d leases took %v, so the next renewal "+
		"would land %v after a lease's validity ends; new leases are refused until a round leaves them slack",
		engine.ErrUnavailable, n, took.Round(time.Millisecond), landing.Sub(validUntil).Round(time.Millisecond))
	p.behind.Store(&err)
}

// Unanswered notes a round of n leases, took long, in which some renewal
// timed out unanswered: new grants are refused until a round is recorded
// that leaves every lease slack.
func (p *Pace) Unanswered(n int, took time.Duration) {
	var none time.Duration
	p.slack.Store(&none)
	err := fmt.Errorf("%w: renewal is falling behind: a round for %d leases took %v and a renewal "+
		"timed out unanswered; new leases are refused until a round leaves them slack",
		engine.ErrUnavailable, n, took.Round(time.Millisecond))
	p.behind.Store(&err)
}

// Err is nil while renewal keeps up, and otherwise an error wrapping
// engine.ErrUnavailable that says how the last round fell behind.
func (p *Pace) Err() error {
	if err := p.behind.Load(); err != nil {
		return *err
	}
	return nil
}

// Slack returns the room the last round left the lease with the least of
// it: how long before the end of its validity its next renewal would land,
// by Record's projection; negative when it would land too late, and 0
// after a round with an unanswered renewal (Unanswered). ok is false
// before the first round and while no lease is renewed.
func (p *Pace) Slack() (slack time.Duration, ok bool) {
	if d := p.slack.Load(); d != nil {
		return *d, true
	}
	return 0, false
}

// InBatches calls do on each set's items in batches of at most size, at
// most parallel calls at a time, and returns once every call has
// returned. do learns which set a batch comes from.
func InBatches[T any](size, parallel int, sets [][]T, do func(set int, batch []T)) {
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, ls := range sets {
		for len(ls) > 0 {
			n := min(len(ls), size)
			batch := ls[:n]
			ls = ls[n:]
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				do(i, batch)
			}()
		}
	}
	wg.Wait()
}

// Backoff is the wait between grant attempts of an engine that polls its
// server for a held key: the delay doubles from Min up to Max, each pause
// drawn between half the delay and the whole of it (full jitter, so that
// waiters released by one event do not come back in lockstep).
type Backoff struct {
	Min, Max time.Duration
}

// Pause waits for delay (jittered), or until kick says the key was
// released in this process, ctx ends or closing closes. It returns the
// next delay: twice this one, up to Max, or twice Min after a kick. An
// ended ctx gives errors.Join(engine.ErrNotAcquired, ctx.Err()), a closed engine
// engine.ErrClosed.
func (b Backoff) Pause(ctx context.Context, closing, kick <-chan struct{}, delay time.Duration) (time.Duration, error) {
	t := time.NewTimer(delay/2 + rand.N(delay/2+1))
	defer t.Stop()
	select {
	case <-t.C:
	case <-kick:
		delay = b.Min // released here: try at once
	case <-ctx.Done():
		return 0, errors.Join(engine.ErrNotAcquired, ctx.Err())
	case <-closing:
		return 0, engine.ErrClosed
	}
	return min(2*delay, b.Max), nil
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// RenewRounds runs the single renewal loop of an engine that renews all
// its leases in rounds (the SQL engines: one UPDATE renews a batch of
// rows). Each round comes interval() after the start of the last one,
// interval being read again every time (a third of the shortest renewed
// TTL, say); while interval() is 0 there is nothing to renew, and the loop
// waits for kick, which the engine signals (without blocking) when it
// grants a renewed lease, so that the new lease's interval is taken into
// account at once. round renews what the engine holds and returns how
// many leases it renewed; pace then records whether the round kept up.
// RenewRounds returns when closing closes.
func RenewRounds(closing, kick <-chan struct{}, interval func() time.Duration, round func() int, pace *Pace) {
	last := time.Now()
	idle := true
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		every := interval()
		if every == 0 {
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
		t.Reset(max(time.Until(last.Add(every)), 0))
		select {
		case <-t.C:
			last = time.Now()
			n := round()
			pace.Record(n, time.Since(last), every)
		case <-kick:
			if !t.Stop() {
				<-t.C
			}
		case <-closing:
			return
		}
	}
}

// Pace records whether an engine's renewal rounds keep up. A round that
// took longer than its interval means the server cannot renew that many
// leases that often; until a round keeps up again the engine refuses new
// grants (with Err) rather than letting held leases lapse. The zero value
// is ready to use.
type Pace struct {
	behind atomic.Pointer[error]
}

// Record notes a round that renewed n leases in took, against the
// interval it had.
func (p *Pace) Record(n int, took, interval time.Duration) {
	if took <= interval {
		p.behind.Store(nil)
		return
	}
	err := fmt.Errorf("%w: renewal is falling behind: renewing %d leases took %v, over the %v "+
		"between rounds; new leases are refused until it keeps up",
		ErrUnavailable, n, took.Round(time.Millisecond), interval.Round(time.Millisecond))
	p.behind.Store(&err)
}

// Err is nil while renewal keeps up, and otherwise an error wrapping
// ErrUnavailable that says by how much the last round fell behind.
func (p *Pace) Err() error {
	if err := p.behind.Load(); err != nil {
		return *err
	}
	return nil
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
// ended ctx gives errors.Join(ErrNotAcquired, ctx.Err()), a closed engine
// ErrClosed.
func (b Backoff) Pause(ctx context.Context, closing, kick <-chan struct{}, delay time.Duration) (time.Duration, error) {
	t := time.NewTimer(delay/2 + rand.N(delay/2+1))
	defer t.Stop()
	select {
	case <-t.C:
	case <-kick:
		delay = b.Min // released here: try at once
	case <-ctx.Done():
		return 0, errors.Join(ErrNotAcquired, ctx.Err())
	case <-closing:
		return 0, ErrClosed
	}
	return min(2*delay, b.Max), nil
}

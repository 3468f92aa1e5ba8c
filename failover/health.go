package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// EngineStatus is one engine's health as the manager last saw it.
type EngineStatus struct {
	Name     string
	Active   bool
	Healthy  bool
	Failures int           // failed pings in a row
	Latency  time.Duration // of the last successful ping
	LastErr  string        // of the last failed ping
}

// healthLoop runs a health round at a fixed schedule (one every interval,
// start to start), and a quick probe of the active engine whenever real
// traffic reports it unavailable.
func (m *Manager) healthLoop() {
	defer close(m.loopDone)
	next := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-m.closing:
			return
		case <-t.C:
			interval := m.checkHealth()
			// The next round starts one interval after this one started;
			// rounds missed while the machine stalled are skipped.
			for next = next.Add(interval); !next.After(time.Now()); next = next.Add(interval) {
			}
		case <-m.suspect:
			m.probeActive()
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(time.Until(next))
	}
}

// pingBudget is how long a health round waits for its pings: a round never
// outlasts its interval, whatever a client library's own retries do.
func pingBudget(interval time.Duration) time.Duration { return interval * 9 / 10 }

// pingAll pings the engines named by idx at once, each bounded by budget,
// and returns their results. A ping still running at the budget counts as
// failed (it is left to finish in the background, and that engine is not
// pinged again until it has).
func (m *Manager) pingAll(idx []int, budget time.Duration) []pingResult {
	type answer struct {
		j int
		r pingResult
	}
	res := make([]pingResult, len(idx))
	answers := make(chan answer, len(idx)) // late answers land here unread
	waiting := 0
	for j, i := range idx {
		if !m.pinging[i].CompareAndSwap(false, true) {
			res[j] = pingResult{err: fmt.Errorf("%w: the previous ping has not answered",
				engine.ErrUnavailable)}
			continue
		}
		res[j] = pingResult{err: fmt.Errorf("%w: no answer to ping within %v", engine.ErrUnavailable,
			budget)}
		waiting++
		go func() {
			defer m.pinging[i].Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			start := time.Now()
			err := m.engines[i].Engine.Ping(ctx)
			answers <- answer{j, pingResult{err: err, d: time.Since(start)}}
		}()
	}
	deadline := time.NewTimer(budget)
	defer deadline.Stop()
	for ; waiting > 0; waiting-- {
		select {
		case a := <-answers:
			res[a.j] = a.r
		case <-deadline.C:
			return res
		}
	}
	return res
}

type pingResult struct {
	err error
	d   time.Duration
}

// checkHealth pings every engine once, applies the policy, and returns the
// interval to the next round.
func (m *Manager) checkHealth() time.Duration {
	m.mu.Lock()
	interval := m.opts.Interval
	m.mu.Unlock()
	idx := make([]int, len(m.engines))
	for i := range idx {
		idx[i] = i
	}
	m.record(idx, m.pingAll(idx, pingBudget(interval)))
	return interval
}

// record applies ping results to the engines named by idx, then the
// policy: it may switch, and tells OnHealth of a change.
func (m *Manager) record(idx []int, res []pingResult) (healthy bool) {
	m.mu.Lock()
	changed := false
	for j, i := range idx {
		h, r := &m.health[i], res[j]
		was := h.Healthy
		if r.err == nil {
			h.Failures, h.Healthy, h.Latency, h.LastErr = 0, true, r.d, ""
		} else {
			h.Failures++
			h.LastErr = r.err.Error()
			if h.Failures >= m.opts.Threshold {
				h.Healthy = false
			}
		}
		changed = changed || h.Healthy != was
	}
	healthy = m.health[m.active].Healthy
	to, reason := m.choose()
	m.mu.Unlock()
	if changed && m.opts.OnHealth != nil {
		m.opts.OnHealth(m.Status())
	}
	if to >= 0 {
		m.switchTo(to, reason, 0)
	}
	return healthy
}

// QuickProbeSpacing is the delay between the quick re-probes that a
// failure on real traffic starts (see Detection in the package
// documentation): the active engine is pinged at once, then again after
// each spacing until it answers or has failed Threshold times in a row.
const QuickProbeSpacing = 50 * time.Millisecond

// noteFailure is called with the error of a call on the active engine:
// ErrUnavailable, with the caller's context still live, asks the health
// loop for a quick probe.
func (m *Manager) noteFailure(ctx context.Context, err error) {
	if err == nil || !errors.Is(err, engine.ErrUnavailable) || (ctx != nil && ctx.Err() != nil) {
		return
	}
	select {
	case m.suspect <- struct{}{}:
	default:
	}
}

// probeActive pings the active engine until it answers or has failed
// Threshold times in a row, QuickProbeSpacing apart. One failed call on a
// healthy engine thus costs one ping and changes nothing.
func (m *Manager) probeActive() {
	m.mu.Lock()
	active, interval, threshold := m.active, m.opts.Interval, m.opts.Threshold
	healthy := m.health[active].Healthy
	m.mu.Unlock()
	if !healthy {
		return // already down: the policy has had its say
	}
	spacing := min(QuickProbeSpacing, interval)
	for n := 0; n < threshold; n++ {
		if n > 0 {
			select {
			case <-m.closing:
				return
			case <-time.After(spacing):
			}
		}
		res := m.pingAll([]int{active}, pingBudget(interval))
		if res[0].err == nil {
			m.record([]int{active}, res)
			return
		}
		if !m.record([]int{active}, res) {
			return // down now
		}
	}
}

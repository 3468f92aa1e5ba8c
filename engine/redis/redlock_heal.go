package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.NodeCounter = (*redlockLease)(nil)

// errShort closes the list of causes of a lease that healing could not
// bring back to a majority.
var errShort = errors.New("short of a majority after a re-take round")

// healParallel bounds the re-take rounds an engine runs at once, so that a
// node restarted under many leases is asked again at the pace its client's
// pool can serve, rather than by every lease at once with most of them
// timing out.
const healParallel = 64

// healInterval is how often a renewed lease that lacks some nodes tries
// them again: the nodes' renewal interval, a third of the TTL.
func (l *redlockLease) healInterval() time.Duration { return l.nodeReq.TTL / 3 }

// scheduleHeal arms the lease's next re-take round after d, replacing any
// round already armed. Rounds run on the engine's Background, which Close
// waits for.
func (l *redlockLease) scheduleHeal(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	if l.healTimer != nil {
		l.healTimer.Stop()
	}
	l.healTimer = time.AfterFunc(d, func() { l.r.frame.Run(l.heal) })
}

// heal is one re-take round: every node that does not hold the lease is
// asked for the key with the acquisition's compare-and-set (only if free),
// all at once. Each node takes at most three node timeouts (acquire, fence
// raise, and a release when the raise failed). A lease left short of a
// majority ends; one still short of every node tries again after
// healInterval.
func (l *redlockLease) heal() {
	l.mu.Lock()
	short := l.held < l.r.quorum
	l.mu.Unlock()
	if !short { // a lease short of a majority must know at once: no queue
		l.r.healSlots <- struct{}{}
		defer func() { <-l.r.healSlots }()
	}
	l.healMu.Lock()
	defer l.healMu.Unlock()
	var missing []int
	l.mu.Lock()
	for i, h := range l.parts {
		if h == nil && !l.ended {
			missing = append(missing, i)
		}
	}
	l.mu.Unlock()
	if len(missing) == 0 {
		return
	}
	errs := l.r.eachOf(missing, l.retake)
	l.mu.Lock()
	held, ended := l.held, l.ended
	l.mu.Unlock()
	switch {
	case ended:
	case held < l.r.quorum:
		l.end(fmt.Errorf("%w: %d of %d nodes hold it, %d needed, and the others could not be taken again: %w",
			engine.ErrLeaseLost, held, len(l.r.nodes), l.r.quorum, errors.Join(append(errs, errShort)...)))
	case held < len(l.r.nodes):
		l.scheduleHeal(l.healInterval())
	}
}

// retake asks node i for the key once. The node counts only after it has
// adopted the lease's token (adoptFence): its fencing counter is then at
// least the lease's token, so a later grant there carries a larger one,
// and it reports the lease's own token for it, not the later one it drew.
// A node that answers but refuses (someone else holds the key there) has
// its counter raised all the same.
func (l *redlockLease) retake(i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), l.wait())
	h, err := l.acquireNode(ctx, i)
	cancel()
	if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
		return fmt.Errorf("node %d: %w", i, err)
	}
	var raised error
	if h == nil {
		raised = l.r.raiseNode(context.Background(), i, l.Key(), l.Token(), l.wait())
	} else {
		raised = l.r.adoptNode(context.Background(), i, l.Key(), h.l, l.Token(), l.wait())
	}
	if h == nil {
		return fmt.Errorf("node %d: %w", i, err)
	}
	l.mu.Lock()
	keep := raised == nil && !l.ended && !h.lost && l.parts[i] == nil
	if keep {
		l.parts[i] = h
		l.held++
	}
	l.mu.Unlock()
	if !keep {
		ctx, cancel := context.WithTimeout(context.Background(), l.wait())
		defer cancel()
		_ = h.l.Release(ctx)
		if raised != nil {
			return fmt.Errorf("node %d: its fencing counter could not be raised: %w", i, raised)
		}
	}
	return nil
}

// eachOf runs f for the nodes in idx concurrently and returns their errors.
func (r *Redlock) eachOf(idx []int, f func(i int) error) []error {
	errs := make([]error, len(idx))
	done := make(chan struct{}, len(idx))
	for k, i := range idx {
		go func() {
			errs[k] = f(i)
			done <- struct{}{}
		}()
	}
	for range idx {
		<-done
	}
	return errs
}

package cerberus

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// hold is one grant from the engine, shared by the nested leases of one
// owner. count is guarded by c.mu.
type hold struct {
	c     *Client
	key   string
	owner uint64        // 0: no reentrancy
	ready chan struct{} // closed once acquire settled
	lease engine.Lease
	sig   *kit.Signal
	obs   Observer // nil: none
	// granter names the engine that granted the lease, for the observer;
	// atomic because the engine may report a loss before Acquire returns.
	granter atomic.Pointer[string]
	// marks records, for an EndObserver, that the grant was reported
	// (markGranted) and that the hold ended (markEnded, with endErr
	// stored first): whichever sets the second mark reports the end, so it
	// is reported once, and never before the grant.
	marks     atomic.Uint32
	endErr    atomic.Pointer[error]
	grantedAt time.Time // set before markGranted
	count     int32     // the nested leases (beside mode: a held lock keeps less)
	mode      engine.Mode
	// limit, when positive, ends the hold that long after its grant
	// (WithHoldLimit); timer is armed at the grant and stopped when the
	// hold ends otherwise.
	limit time.Duration
	timer atomic.Pointer[time.Timer]
	// letGo is claimed by whichever gives the key up first, the last
	// Unlock or the hold limit, so that only one of them releases it.
	letGo atomic.Bool
}

func (h *hold) acquire(ctx context.Context, req engine.Request) error {
	h.sig = kit.NewSignal(nil)
	req.OnLost = h.lost
	start := time.Now()
	l, err := h.c.eng.Acquire(ctx, req)
	if h.obs != nil {
		ev := AcquireEvent{Engine: engineOf(h.c.eng, nil), Key: h.key, Shared: h.mode == engine.Shared,
			Wait: req.Wait, Duration: time.Since(start), Err: err}
		if err == nil {
			ev.Engine, ev.Token = engineOf(h.c.eng, l), l.Token()
			h.granter.Store(&ev.Engine)
		}
		h.obs.Acquired(ev)
		if err == nil {
			h.grantedAt = start.Add(ev.Duration)
			h.mark(markGranted)
		}
	}
	if err != nil {
		return err
	}
	h.lease = l
	if h.limit > 0 {
		h.timer.Store(time.AfterFunc(h.limit, h.expire))
		if h.sig.Closed() {
			h.stopTimer() // lost before the timer was stored
		}
	}
	return nil
}

// lost is the engine's OnLost callback.
func (h *hold) lost(err error) { h.end(err) }

// end closes the hold's signal with err unless it is closed already, and
// reports whether this call closed it. The observer hears of the loss
// before Done closes, so whoever wakes on Done finds it reported.
func (h *hold) end(err error) bool {
	h.stopTimer()
	if h.obs != nil && !h.sig.Closed() {
		name := engineOf(h.c.eng, nil)
		if n := h.granter.Load(); n != nil {
			name = *n
		}
		h.obs.Lost(LostEvent{Engine: name, Key: h.key, Err: err})
	}
	h.ended(err)
	closed := h.sig.Close(err)
	h.c.forget(h)
	return closed
}

// Marks of hold.marks.
const (
	markGranted = 1 << iota
	markEnded
)

// ended notes that the hold ends with err, and reports it to an
// EndObserver if the grant was reported and the end was not yet. Call it
// before closing h.sig, so that the end is reported before Done closes.
func (h *hold) ended(err error) {
	if _, ok := h.obs.(EndObserver); !ok {
		return
	}
	h.endErr.CompareAndSwap(nil, &err)
	h.mark(markEnded)
}

// mark sets bit in h.marks and, if that completes both marks, reports the
// end.
func (h *hold) mark(bit uint32) {
	eo, ok := h.obs.(EndObserver)
	if !ok {
		return
	}
	old := h.marks.Or(bit)
	if old&bit != 0 || old|bit != markGranted|markEnded {
		return
	}
	eo.Ended(EndEvent{Engine: *h.granter.Load(), Key: h.key, Shared: h.mode == engine.Shared,
		Held: time.Since(h.grantedAt), Err: *h.endErr.Load()})
}

func (h *hold) stopTimer() {
	if t := h.timer.Load(); t != nil {
		t.Stop()
	}
}

// expire ends a hold that reached its limit: the holder is told (Done
// closes with ErrHoldLimit) before the key is released on the server, with
// a context of its own since no caller's is at hand. A release the server
// does not answer is retried as Unlock's is.
func (h *hold) expire() {
	if !h.letGo.CompareAndSwap(false, true) {
		return // Unlock is releasing it
	}
	if !h.end(fmt.Errorf("%w: %q after %v", ErrHoldLimit, h.key, h.limit)) {
		return // released or lost meanwhile
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := h.lease.Release(ctx); err != nil && h.lease.Err() == nil {
		go retryRelease(h.lease)
	}
}

// release counts one nested lease down and gives the key up at zero.
func (h *hold) release(ctx context.Context) error {
	c := h.c
	c.mu.Lock()
	h.count--
	last := h.count == 0
	c.mu.Unlock()
	if h.sig.Closed() {
		if last {
			c.forget(h)
		}
		return fmt.Errorf("%w: %q: %w", engine.ErrNotHeld, h.key, h.sig.Err())
	}
	if !last {
		return nil
	}
	if !h.letGo.CompareAndSwap(false, true) {
		<-h.sig.Done() // the hold limit is ending it, and releases the key
		return fmt.Errorf("%w: %q: %w", engine.ErrNotHeld, h.key, h.sig.Err())
	}
	h.stopTimer()
	c.forget(h)
	err := h.lease.Release(ctx)
	if err != nil {
		cause := h.lease.Err()
		if cause == nil {
			// The engine kept its lease: unknown whether the server does,
			// but this holder has let go of it. The engine may still renew
			// it (a session keeps it alive), so the release is retried
			// until it goes through or the lease ends.
			cause = fmt.Errorf("%w: release failed: %w", engine.ErrLeaseLost, err)
			go retryRelease(h.lease)
		}
		h.ended(cause)
		h.sig.Close(cause)
		return err
	}
	h.ended(engine.ErrReleased)
	h.sig.Close(engine.ErrReleased)
	return nil
}

// Lease is a granted lock. Its methods are safe for concurrent use.
//
// A lease from LockAll covers several keys: Key and Token describe its first
// key, Parts lists every key's own lease, Done closes when any of them ends,
// and Unlock releases them all.
type Lease struct {
	h        *hold
	unlocked atomic.Bool
	all      *allLease // set only for LockAll leases
}

// allLease is what a LockAll lease has besides a Lease: the lease of each
// key and the signal of the whole.
type allLease struct {
	parts []*Lease
	multi *kit.Signal
	once  sync.Once
}

// Key returns the locked key (the first in sorted order for LockAll).
func (l *Lease) Key() string {
	if l.all != nil {
		return l.all.parts[0].Key()
	}
	return l.h.key
}

// Keys returns every key the lease covers, sorted.
func (l *Lease) Keys() []string {
	if l.all == nil {
		return []string{l.h.key}
	}
	keys := make([]string, len(l.all.parts))
	for i, p := range l.all.parts {
		keys[i] = p.Key()
	}
	return keys
}

// Parts returns the per-key leases of a LockAll lease, sorted by key, or
// the lease itself. Use their tokens to fence each resource; unlock the
// LockAll lease, not its parts.
func (l *Lease) Parts() []*Lease {
	if l.all == nil {
		return []*Lease{l}
	}
	return append([]*Lease(nil), l.all.parts...)
}

// Shared reports whether the lease is a shared (read) lease.
func (l *Lease) Shared() bool {
	if l.all != nil {
		return false
	}
	return l.h.mode == engine.Shared
}

// Nodes reports, for a lease granted by an engine over several nodes
// (engine/redis's Redlock), how many of its nodes hold the lease now and
// how many there are; ok is false for any other engine, and for a LockAll
// lease (ask its Parts). held is 0 once the lease has ended. For metrics:
// a lease with held < total survives one node failure fewer than it could.
func (l *Lease) Nodes() (held, total int, ok bool) {
	if l.all != nil {
		return 0, 0, false
	}
	n, ok := l.h.lease.(engine.NodeCounter)
	if !ok {
		return 0, 0, false
	}
	held, total = n.Nodes()
	return held, total, total > 0
}

// Token returns the fencing token: it strictly increases over successive
// grants of the key on its engine. Nested leases of one owner share their
// outer lease's token. A fenced resource accepts a write only if its token
// is at least the largest it has seen.
func (l *Lease) Token() uint64 {
	if l.all != nil {
		return l.all.parts[0].Token()
	}
	return l.h.lease.Token()
}

// Done is closed when the lease ends: unlocked (its last nested lease, for
// reentrant holds), expired, lost, past its hold limit (WithHoldLimit),
// or switched away. Check it before acting
// on the lock, and fence writes with Token, since the loss may be learnt late.
func (l *Lease) Done() <-chan struct{} {
	if l.all != nil {
		l.watchParts()
		return l.all.multi.Done()
	}
	return l.h.sig.Done()
}

// Err is nil while the lease is held and says why it ended after Done
// closes: ErrReleased, ErrLeaseLost, ErrHoldLimit (which wraps
// ErrLeaseLost), ErrEngineSwitched or ErrClosed.
func (l *Lease) Err() error {
	if l.all != nil {
		l.watchParts()
		return l.all.multi.Err()
	}
	return l.h.sig.Err()
}

// Unlock releases the lease on the server (for a nested lease, it counts the
// hold down and releases at zero). Unlock a second time, or after the lease
// was lost or reached its hold limit, returns ErrNotHeld wrapped with the
// reason (such as ErrHoldLimit). Pass a context that
// is not cancelled, such as context.WithoutCancel(ctx), so that a release
// after a cancelled operation still reaches the server. If the server does
// not answer, Unlock returns that error (ErrUnavailable) and the lease ends
// all the same, with ErrLeaseLost: the key is no longer the caller's, and
// it is freed by its TTL or by a release the client retries every second
// in the background until the server answers or the lease ends.
func (l *Lease) Unlock(ctx context.Context) error {
	if l.unlocked.Swap(true) {
		return fmt.Errorf("%w: lease of %q was already unlocked", engine.ErrNotHeld, l.Key())
	}
	if l.all == nil {
		return l.h.release(ctx)
	}
	var errs []error
	for i := len(l.all.parts) - 1; i >= 0; i-- {
		errs = append(errs, l.all.parts[i].Unlock(ctx))
	}
	l.watchParts()
	l.all.multi.Close(engine.ErrReleased)
	return errors.Join(errs...)
}

func newMulti(parts []*Lease) *Lease {
	sortByKey(parts)
	return &Lease{all: &allLease{parts: parts, multi: kit.NewSignal(nil)}}
}

// watchParts starts, once, the goroutine that ends a LockAll lease when any
// part ends. It exits when the lease ends.
func (l *Lease) watchParts() {
	l.all.once.Do(func() {
		cases := make([]reflect.SelectCase, 0, len(l.all.parts)+1)
		cases = append(cases,
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(l.all.multi.Done())})
		for _, p := range l.all.parts {
			cases = append(cases,
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.h.sig.Done())})
		}
		go func() {
			i, _, _ := reflect.Select(cases)
			if i > 0 {
				l.all.multi.Close(l.all.parts[i-1].Err())
			}
		}()
	})
}

// releaseRetry is how often retryRelease tries again, and releaseTimeout
// bounds each try.
const (
	releaseRetry   = time.Second
	releaseTimeout = 5 * time.Second
)

// retryRelease releases l, whose Release failed while its engine kept it
// (the server did not answer), every releaseRetry until a try goes
// through or finds it no longer held, or l ends: by expiry, by session
// loss, or when the engine closes, which every Client.Close does.
func retryRelease(l engine.Lease) {
	t := time.NewTicker(releaseRetry)
	defer t.Stop()
	for {
		select {
		case <-l.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		err := l.Release(ctx)
		cancel()
		if err == nil || errors.Is(err, engine.ErrNotHeld) || errors.Is(err, engine.ErrClosed) {
			return
		}
	}
}

package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// epoch is the life of one etcd lease of the engine. Every queue entry is
// attached to the lease of the epoch it was made in, and every engine
// lease ends when its epoch does.
type epoch struct {
	id   clientv3.LeaseID
	ttl  time.Duration
	lost chan struct{} // closed when the epoch ends
	once sync.Once
	// valid is the unix ns until which the etcd lease is known to live
	// on the server: the last renewal's send time plus the TTL it
	// answered, less engine.Margin. A grant learned after it (the
	// process was stopped, and the watch's deletion event arrived before
	// keepAlive could end the epoch) may rest on an entry already gone.
	valid atomic.Int64

	mu   sync.Mutex
	free []uint64 // entry slots given back, reused lowest-last
	next uint64   // the lowest slot never taken
}

// take returns a slot number for a new entry: one given back if any, so
// that an engine's entry names repeat. etcd keeps an index entry for every
// key name it has seen until the next compaction, and a range read walks
// them all, so fresh names on every acquisition would slow every later
// read of the key's queue (etcd's own Mutex reuses one name per session
// the same way).
func (ep *epoch) take() uint64 {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if n := len(ep.free); n > 0 {
		s := ep.free[n-1]
		ep.free = ep.free[:n-1]
		return s
	}
	ep.next++
	return ep.next - 1
}

// renewed notes that the etcd lease lives on the server until expiry.
func (ep *epoch) renewed(expiry time.Time) {
	ep.valid.Store(expiry.Add(-engine.Margin(ep.ttl)).UnixNano())
}

// live reports whether the etcd lease is known to live on the server now.
func (ep *epoch) live() bool { return time.Now().UnixNano() < ep.valid.Load() }

// give returns a slot whose entry is known to be gone.
func (ep *epoch) give(slot uint64) {
	ep.mu.Lock()
	ep.free = append(ep.free, slot)
	ep.mu.Unlock()
}

// end closes the epoch's lost channel, once, and reports whether this call
// did.
func (ep *epoch) end() bool {
	ended := false
	ep.once.Do(func() { close(ep.lost); ended = true })
	return ended
}

// epoch returns the live etcd lease, granting one if there is none. One
// grant runs at a time; calls that arrive meanwhile wait for it.
func (e *Engine) epoch(ctx context.Context) (*epoch, error) {
	for {
		e.mu.Lock()
		ep := e.cur
		e.mu.Unlock()
		if ep != nil {
			return ep, nil
		}
		select {
		case e.grantSem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		e.mu.Lock()
		ep = e.cur
		e.mu.Unlock()
		if ep != nil {
			<-e.grantSem
			return ep, nil
		}
		ep, err := e.grant(ctx)
		<-e.grantSem
		return ep, err
	}
}

// grant asks etcd for a new lease and starts keeping it alive.
func (e *Engine) grant(ctx context.Context) (*epoch, error) {
	bctx, cancel := e.bound(ctx)
	defer cancel()
	cli, err := e.connect(bctx)
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	resp, err := cli.Grant(bctx, int64(e.leaseTTL/time.Second))
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(resp.TTL) * time.Second
	e.granted.Store(int64(ttl))
	ep := &epoch{id: resp.ID, ttl: ttl, lost: make(chan struct{})}
	ep.renewed(sent.Add(ttl))
	e.mu.Lock()
	if e.frame.ClosedLocked() {
		e.mu.Unlock()
		e.frame.Run(func() { e.revoke(ep) })
		return nil, engine.ErrClosed
	}
	e.cur = ep
	e.mu.Unlock()
	go e.keepAlive(ep, sent.Add(ttl))
	return ep, nil
}

// keepAlive renews ep every third of its TTL until the epoch or the engine
// ends. It keeps its own clock of the lease's expiry on the server, from
// the time each renewal was sent (the server counts from when it ran it,
// which is later): when that expiry minus engine.Margin passes without a
// renewal answered, or etcd answers that the lease is gone (expired or
// revoked), the epoch ends and its leases are lost. No renewal outlasts
// that instant, so the loss is told on time even while a renewal hangs
// on an unresponsive member; only a loss noticed after the expiry itself
// (this process was stopped) first reads the force-release marks.
func (e *Engine) keepAlive(ep *epoch, expiry time.Time) {
	margin := engine.Margin(ep.ttl)
	loss := time.NewTimer(time.Until(expiry) - margin)
	defer loss.Stop()
	interval := ep.ttl / 3
	next := time.NewTimer(interval)
	defer next.Stop()
	for {
		select {
		case <-next.C:
		case <-loss.C:
			if time.Now().After(expiry) {
				// Past the server's expiry already (a pause): a round
				// trip for the marks costs no safety. On time, the leases
				// end now, before etcd can expire them.
				e.tellBefore(ep)
			}
			e.lose(ep, fmt.Errorf("%w: etcd lease %x not renewed within its TTL (%v)",
				engine.ErrLeaseLost, int64(ep.id), ep.ttl))
			return
		case <-ep.lost:
			return
		case <-e.frame.Closing():
			return
		}
		// The renewal may take until the loss instant, not past it: a
		// renewal hung on a stopped member would otherwise hold the loop
		// past expiry, and the loss would be told only after the server
		// could have expired the lease (the checker saw a permit granted
		// to another process 130ms before its old holder was told).
		sent := time.Now()
		ctx, cancel := context.WithDeadline(e.frame.Context(), expiry.Add(-margin))
		resp, err := e.c().KeepAliveOnce(ctx, ep.id)
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			expiry = sent.Add(time.Duration(resp.TTL) * time.Second)
			ep.renewed(expiry)
			loss.Reset(time.Until(expiry) - margin)
			next.Reset(interval)
			e.tellBefore(ep)
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil:
			e.tellBefore(ep)
			e.lose(ep, fmt.Errorf("%w: etcd lease %x expired or was revoked", engine.ErrLeaseLost,
				int64(ep.id)))
			return
		default:
			next.Reset(min(interval, 200*time.Millisecond)) // try again soon; the loss timer runs on
		}
	}
}

// tellBefore reads ep's force-release marks (tellReleased), waiting for
// the server no longer than releaseMarkWait.
func (e *Engine) tellBefore(ep *epoch) {
	ctx, cancel := context.WithTimeout(e.frame.Context(), releaseMarkWait)
	defer cancel()
	e.tellReleased(ctx, ep)
}

// releaseMarkWait bounds the read of the force-release marks that a
// renewal, or the loss of the etcd lease, makes.
const releaseMarkWait = 500 * time.Millisecond

// lose ends ep and every lease granted in it with err, and revokes the
// etcd lease in the background in case the server still keeps it (a
// renewal that went unanswered), which deletes its entries.
func (e *Engine) lose(ep *epoch, err error) {
	if !ep.end() {
		return
	}
	e.mu.Lock()
	if e.cur == ep {
		e.cur = nil
	}
	var lost []*lease
	for l := range e.frame.AllLocked() {
		if l.ep == ep {
			lost = append(lost, l)
			e.frame.ForgetLocked(l)
		}
	}
	e.mu.Unlock()
	for _, l := range lost {
		if l.markEnded() {
			l.Signal.Close(err)
		}
	}
	e.frame.Run(func() { e.revoke(ep) })
}

// revoke revokes ep's etcd lease, within its TTL, ignoring failures: a
// lease that cannot be revoked expires on its own.
func (e *Engine) revoke(ep *epoch) {
	ctx, cancel := context.WithTimeout(context.Background(), ep.ttl)
	defer cancel()
	_, _ = e.c().Revoke(ctx, ep.id)
}

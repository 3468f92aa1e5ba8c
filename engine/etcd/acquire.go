package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Acquire grants a lease; see engine.Engine.
//
// It puts a queue entry attached to the engine's etcd lease and reads the
// key's queue in the same transaction (see the package documentation). The
// request is granted when no entry ahead blocks it. Otherwise, without
// req.Wait, it deletes its entry and returns engine.ErrNotAcquired; with
// req.Wait it watches the one entry it waits for (a counted request held
// back by the count watches the deletions in the queue) and decides again
// when that entry goes, when DefaultRecheck (or WithRecheck) passes, or when
// the watch fails. When ctx ends it deletes its entry and returns
// errors.Join(engine.ErrNotAcquired, ctx.Err()); when the engine closes,
// engine.ErrClosed. Server failures are *engine.OpError values wrapping
// engine.ErrUnavailable, refusals by etcd's permissions ones wrapping
// engine.ErrAccessDenied; the entry is deleted then too, or goes with the
// etcd lease.
func (e *Engine) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := e.frame.Enter(ctx, e.Validate(req)); err != nil {
		return nil, err
	}
	defer e.frame.Exit()
	actx, cancel := e.frame.Bind(ctx)
	defer cancel()
	l, err := e.acquire(actx, req)
	if err == nil {
		return l, nil
	}
	switch {
	case errors.Is(context.Cause(actx), engine.ErrClosed) || errors.Is(err, engine.ErrClosed):
		return nil, engine.ErrClosed
	case ctx.Err() != nil:
		return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
	case errors.Is(err, engine.ErrNotAcquired):
		return nil, err
	}
	return nil, e.opError(ctx, "acquire", req.Key, err)
}

// queued is a request's entry in the key's queue, from its put to its
// grant.
type queued struct {
	e     *Engine
	req   engine.Request
	ep    *epoch
	queue string // the key's queue range
	name  string // the entry
	slot  uint64 // the slot in its name
	rev   int64  // its create revision; 0 until the put is known to be done
	seen  int64  // the revision of the last read of the queue
}

// acquire does the work of Acquire. Errors from ctx are sorted out by the
// caller.
func (e *Engine) acquire(ctx context.Context, req engine.Request) (*lease, error) {
	q, w, err := e.enqueue(ctx, req)
	if err != nil {
		return nil, err
	}
	for !w.granted {
		if !req.Wait {
			return nil, q.giveUp(fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key))
		}
		if w, err = q.await(ctx, w); err != nil {
			return nil, q.giveUp(err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, q.giveUp(err) // granted just as ctx ended: give the entry back
	}
	return e.register(q)
}

// enqueue puts the request's entry and reads the queue in one transaction.
// A put refused because the engine's etcd lease is gone (it expired while
// the engine could not tell) ends that epoch and is tried once more on a
// new lease.
func (e *Engine) enqueue(ctx context.Context, req engine.Request) (*queued, wait, error) {
	for attempt := 0; ; attempt++ {
		ep, err := e.epoch(ctx)
		if err != nil {
			return nil, wait{}, err
		}
		q := &queued{e: e, req: req, ep: ep, queue: e.queueRange(req.Key), slot: ep.take()}
		q.name = entryName(q.queue, ep.id, q.slot, req.Mode, req.Limit)
		bctx, cancel := e.bound(ctx)
		resp, err := e.c().Txn(bctx).Then(
			clientv3.OpPut(q.name, req.Value, clientv3.WithLease(ep.id)),
			clientv3.OpGet(q.queue, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		).Commit()
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			e.lose(ep, fmt.Errorf("%w: etcd lease %x is gone", engine.ErrLeaseLost, int64(ep.id)))
			continue
		}
		if err != nil {
			// The put may have happened after all: delete it.
			return nil, wait{}, q.giveUp(err)
		}
		if len(resp.Responses) != 2 {
			return nil, wait{}, q.giveUp(fmt.Errorf("etcd: malformed reply to the put of %q", q.name))
		}
		q.rev, q.seen = resp.Header.Revision, resp.Header.Revision
		if q.rev <= 0 {
			return nil, wait{}, q.giveUp(fmt.Errorf("etcd: no revision in the reply to the put of %q", q.name))
		}
		w, err := q.decide(resp.Responses[1].GetResponseRange().Kvs)
		if err != nil {
			return nil, wait{}, q.giveUp(err)
		}
		return q, w, nil
	}
}

// decide finds what the entry waits for in a listing of the queue.
func (q *queued) decide(kvs []*kvPair) (wait, error) {
	w, found := blocker(parseQueue(q.queue, kvs), q.rev)
	if !found {
		// Only the end of the etcd lease removes our entry.
		return wait{}, fmt.Errorf("%w: queue entry %q vanished", errLeaseGone, q.name)
	}
	return w, nil
}

// list reads the queue up to the request's own entry.
func (q *queued) list(ctx context.Context) (wait, error) {
	bctx, cancel := q.e.bound(ctx)
	defer cancel()
	resp, err := q.e.c().Get(bctx, q.queue, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithMaxCreateRev(q.rev), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return wait{}, err
	}
	q.seen = resp.Header.Revision
	return q.decide(resp.Kvs)
}

// await waits until what blocks the request may have changed, then
// decides again. A writer (or an uncounted reader) watches the one entry
// it waits for, from just after the revision it read the queue at, so no
// deletion is missed; when that entry was the only one ahead that could
// block it, its deletion is the grant (no entry can join ahead of an
// existing one). A counted reader held back by the count watches the
// queue's deletions of entries ahead of it.
func (q *queued) await(ctx context.Context, w wait) (wait, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ch clientv3.WatchChan
	if w.counted {
		ch = q.e.c().Watch(wctx, q.queue, clientv3.WithPrefix(), clientv3.WithRev(q.seen+1),
			clientv3.WithFilterPut(), clientv3.WithPrevKV())
	} else {
		ch = q.e.c().Watch(wctx, w.block, clientv3.WithRev(q.seen+1), clientv3.WithFilterPut())
	}
	recheck := time.NewTimer(q.e.recheck)
	defer recheck.Stop()
	for {
		select {
		case resp, ok := <-ch:
			if !ok || resp.Err() != nil || resp.Canceled {
				return q.list(ctx)
			}
			for _, ev := range resp.Events {
				if w.counted {
					if ev.PrevKv != nil && ev.PrevKv.CreateRevision >= q.rev {
						continue // behind us
					}
					return q.list(ctx)
				}
				if w.ahead == 1 && !q.counted() {
					return wait{granted: true}, nil
				}
				return q.list(ctx)
			}
		case <-recheck.C:
			return q.list(ctx)
		case <-q.ep.lost:
			return wait{}, fmt.Errorf("%w while waiting", errLeaseGone)
		case <-ctx.Done():
			return wait{}, ctx.Err()
		}
	}
}

// counted reports whether the request is a counted shared one, whose grant
// also depends on the count of entries ahead.
func (q *queued) counted() bool { return q.req.Mode == engine.Shared && q.req.Limit > 0 }

// giveUp deletes the entry and returns err. It waits for the delete up to
// kit.UndoWait; a slower one goes on in the background (and the entry
// goes with the etcd lease if it fails).
func (q *queued) giveUp(err error) error {
	q.e.frame.RunUpTo(kit.UndoWait, func() { q.e.deleteEntry(q.ep, q.name, q.rev, q.slot) })
	return err
}

// deleteEntry deletes an entry the engine no longer wants, within the
// lease TTL, and gives its slot back once it is known to be gone. With its
// create revision (rev > 0) the delete is a compare-and-delete on it: the
// name may belong to a later entry by then. Without (the put's outcome is
// unknown) it is plain, and the slot is not reused in this etcd lease, as
// the put might still land.
func (e *Engine) deleteEntry(ep *epoch, name string, rev int64, slot uint64) {
	select {
	case <-ep.lost:
		return // gone with its lease, or going
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), ep.ttl)
	defer cancel()
	if rev <= 0 {
		_, _ = e.c().Delete(ctx, name)
		return
	}
	if _, err := e.deleteOwn(ctx, name, rev); err == nil {
		ep.give(slot)
	}
}

// deleteOwn deletes name if its create revision is rev, and reports
// whether it did.
func (e *Engine) deleteOwn(ctx context.Context, name string, rev int64) (bool, error) {
	resp, err := e.c().Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(name), "=", rev)).
		Then(clientv3.OpDelete(name)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// register turns a granted entry into a lease, unless the engine closed or
// the epoch ended meanwhile, or its etcd lease is no longer known to live:
// a process stopped longer than the TTL while waiting wakes to the
// deletion that would grant it before keepAlive wakes to end the epoch,
// and by then its own entry may have expired and the key gone to another.
func (e *Engine) register(q *queued) (*lease, error) {
	l := &lease{LeaseCore: kit.NewLeaseCore(q.req.Key, q.req.Mode, q.req.OnLost), eng: e, name: q.name,
		slot: q.slot, ep: q.ep}
	l.SetToken(uint64(q.rev))
	if err := e.frame.Track(l, func() error {
		if e.cur != q.ep || !q.ep.live() {
			return fmt.Errorf("%w during acquire", errLeaseGone)
		}
		if !q.req.Renew {
			l.mu.Lock()
			l.timer = time.AfterFunc(q.req.TTL, l.expire)
			l.mu.Unlock()
		}
		return nil
	}); err != nil {
		return nil, q.giveUp(err)
	}
	return l, nil
}

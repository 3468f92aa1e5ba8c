package consul

import (
	"context"
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
)

// waiterHead starts the name of a fair-mode waiter key: "w-x-<lease>" for
// an exclusive waiter, "w-s-<lease>" for a shared one. The key is held with
// the waiter's session, so a crashed waiter leaves the queue by itself, and
// its CreateIndex (a Raft index) is its place in the queue.
const waiterHead = "w-"

// waiter is one entry of a key's fair-mode queue.
type waiter struct {
	key   string // full KV key
	lease string
	mode  engine.Mode
	order uint64 // CreateIndex of the waiter key
}

// waiterKey is l's waiter key.
func waiterKey(l *lease) string {
	m := "x-"
	if l.Mode() == engine.Shared {
		m = "s-"
	}
	return l.dir + waiterHead + m + l.id
}

// parseWaiter reads a waiter key name (after the folder).
func parseWaiter(rest string, p *api.KVPair) (waiter, bool) {
	if len(rest) < len(waiterHead)+3 || rest[:len(waiterHead)] != waiterHead {
		return waiter{}, false
	}
	w := waiter{key: p.Key, lease: rest[len(waiterHead)+2:], order: p.CreateIndex}
	switch rest[len(waiterHead) : len(waiterHead)+2] {
	case "x-":
		w.mode = engine.Exclusive
	case "s-":
		w.mode = engine.Shared
	default:
		return waiter{}, false
	}
	return w, true
}

// watched returns the key whose change may let a queued request go: the
// nearest waiter before it that it must let go first (any waiter for an
// ordered request, see lease.ordered; a writer for an uncounted reader),
// or else the lock document. Watching
// one key, like ZooKeeper's predecessor watch, wakes one waiter per change
// rather than the whole queue.
func (st *state) watched(ordered bool, me waiter, doc string) string {
	var best *waiter
	for i, w := range st.waiters {
		if w.order >= me.order || w.lease == me.lease {
			continue
		}
		if !ordered && w.mode != engine.Exclusive {
			continue
		}
		if best == nil || w.order > best.order {
			best = &st.waiters[i]
		}
	}
	if best != nil {
		return best.key
	}
	return doc
}

// waitKey blocks on one key until it changes after index, or for the
// engine's wait time, and reports whether the key exists then.
func (e *Engine) waitKey(ctx context.Context, key string, index uint64) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, cleanupTimeout+2*e.cfg.recheck)
	defer cancel()
	q := e.query(rctx)
	q.WaitIndex, q.WaitTime = max(index, 1), e.cfg.recheck
	p, _, err := e.kv.Get(key, q)
	return p != nil, err
}

// ahead reports whether a waiter that would go before l is queued before
// position order (0: before a newcomer): for a writer, any waiter; for an
// uncounted reader, a writer; for a counted reader, a writer, or so many
// waiters that with the live holders they would take every permit (when
// there is a permit for each earlier waiter and for l, l takes one from no
// one, so the earlier ones and l may go at once).
func (st *state) ahead(l *lease, order uint64) bool {
	n := 0
	for _, w := range st.waiters {
		if w.lease == l.id || (order != 0 && w.order >= order) {
			continue
		}
		if l.Mode() == engine.Exclusive || w.mode == engine.Exclusive {
			return true
		}
		n++
	}
	return l.limit > 0 && n > 0 && n >= l.limit-st.live()
}

// find returns l's own waiter entry.
func (st *state) find(id string) (waiter, bool) {
	for _, w := range st.waiters {
		if w.lease == id {
			return w, true
		}
	}
	return waiter{}, false
}

// enqueue adds l to the key's queue and (re)writes the queue marker, so
// that a writer's blind first attempt fails while l waits, and so that a
// waiter that saw itself as the last one cannot delete the marker from
// under l (its delete checks the marker's index).
func (e *Engine) enqueue(ctx context.Context, l *lease) (outcome, error) {
	ok, _, out, err := e.txn(ctx, api.KVTxnOps{
		{Verb: api.KVLock, Key: waiterKey(l), Value: []byte(e.cfg.owner), Session: l.sess.id},
		{Verb: api.KVSet, Key: markerKey(l)},
	})
	if err != nil {
		return 0, err
	}
	if ok {
		l.queued = true
		return granted, nil
	}
	return out, nil
}

// acquireFair is a waiting Acquire in fair mode: the request joins the
// key's queue and is tried only when nothing queued before it must go
// first (for a writer: no one; for a reader: no writer). Each waiter
// watches only the key it waits for (see state.watched), and only the one
// whose turn it is writes, so a release costs one grant, not a stampede.
func (e *Engine) acquireFair(ctx context.Context, l *lease) error {
	f := &fairWait{e: e, l: l, backoff: backoff{minBackoff}, direct: true}
	for range waitAttempts {
		if done, err := f.step(ctx); done {
			return err
		}
	}
	return e.opErr(ctx, "acquire", l.Key(), fmt.Errorf("gave up after %d attempts", waitAttempts))
}

// fairWait is one acquireFair from step to step.
type fairWait struct {
	e *Engine
	l *lease
	backoff
	direct bool // one attempt without queueing, while no one queues
}

// step reads the key and its queue and takes the one action they call for:
// a direct attempt while no one queues, joining the queue, the attempt
// when it is l's turn, or a wait on the key l waits for. done is true when
// acquireFair should return err.
func (f *fairWait) step(ctx context.Context) (done bool, err error) {
	e, l := f.e, f.l
	s, err := e.session(ctx)
	if err != nil {
		return true, err
	}
	if l.sess != nil && l.sess != s {
		l.queued = false // the old session took the waiter key with it
	}
	l.sess = s
	st, err := e.read(ctx, l.dir, 0)
	if err != nil {
		return true, e.opErr(ctx, "acquire", l.Key(), err)
	}
	me, queued := st.find(l.id)
	switch {
	case !queued && f.direct && len(st.waiters) == 0 && !blocks(st, l):
		f.direct = false
		return f.try(ctx, s, st)
	case !queued:
		return f.join(ctx, s)
	case !blocks(st, l) && !st.ahead(l, me.order) ||
		l.Mode() == engine.Exclusive && st.prunable() && !st.ahead(l, me.order):
		return f.takeTurn(ctx, s, st)
	}
	return f.waitTurn(ctx, s, st, me)
}

// try is one attempt for the key with st, the state last read.
func (f *fairWait) try(ctx context.Context, s *session, st *state) (done bool, err error) {
	var out outcome
	if f.l.Mode() == engine.Exclusive {
		out, err = f.e.tryExclusive(ctx, f.l, st)
	} else {
		out, err = f.e.tryShared(ctx, f.l, st)
	}
	if err != nil {
		return true, f.e.opErr(ctx, "acquire", f.l.Key(), err)
	}
	if out == sessionGone {
		s.lose("invalidated")
	}
	return out == granted, nil
}

// join adds l to the key's queue.
func (f *fairWait) join(ctx context.Context, s *session) (done bool, err error) {
	out, err := f.e.enqueue(ctx, f.l)
	if err != nil {
		return true, f.e.opErr(ctx, "acquire", f.l.Key(), err)
	}
	switch out {
	case sessionGone:
		s.lose("invalidated")
	case granted:
	default: // not expected for a key of its own; do not spin
		if err := f.pause(ctx); err != nil {
			return true, err
		}
	}
	return false, nil
}

// takeTurn is the attempt of a queued l whose turn it is: it prunes dead
// holders first, if any.
func (f *fairWait) takeTurn(ctx context.Context, s *session, st *state) (done bool, err error) {
	e, l := f.e, f.l
	var out outcome
	switch {
	case l.Mode() == engine.Exclusive && st.prunable():
		out, err = e.prune(ctx, l, st)
		if out == granted {
			out = conflict // pruned: look again
		}
	case l.Mode() == engine.Exclusive:
		out, err = e.tryExclusive(ctx, l, st)
	default:
		out, err = e.tryShared(ctx, l, st)
	}
	if err != nil {
		return true, e.opErr(ctx, "acquire", l.Key(), err)
	}
	switch out {
	case granted:
		return true, nil
	case sessionGone:
		s.lose("invalidated")
	case delayed:
		if err := f.pause(ctx); err != nil {
			return true, err
		}
	}
	return false, nil
}

// waitTurn blocks on the key l waits for (see state.watched) until it
// changes or the wait time passes.
func (f *fairWait) waitTurn(ctx context.Context, s *session, st *state,
	me waiter) (done bool, err error) {
	e, l := f.e, f.l
	watched := st.watched(l.ordered(), me, l.doc)
	exists, err := e.waitKey(ctx, watched, st.index)
	if err != nil {
		return true, e.opErr(ctx, "acquire", l.Key(), err)
	}
	if watched != l.doc || exists || l.Mode() != engine.Exclusive {
		return false, nil
	}
	// A writer that watched the document was first in the queue (later
	// arrivals queue behind it), and the document is gone: its turn,
	// without another read.
	return f.try(ctx, s, st)
}

// dequeueOp is the operation that removes l's waiter key in the grant
// transaction, or nil if l is not queued.
func dequeueOp(l *lease) *api.KVTxnOp {
	if !l.queued {
		return nil
	}
	return &api.KVTxnOp{Verb: api.KVDelete, Key: waiterKey(l)}
}

// dropQueueOps are the operations a queued l adds to its grant to delete
// the queue marker when st, its last read, showed no other waiter: a check
// of the marker's index, which any later enqueue changes, and the delete.
func dropQueueOps(l *lease, st *state) api.KVTxnOps {
	if st == nil || st.marker == nil {
		return nil
	}
	for _, w := range st.waiters {
		if w.lease != l.id {
			return nil
		}
	}
	return deleteMarkerOps(l, st.marker.ModifyIndex)
}

// markerKey is the queue marker of l's key.
func markerKey(l *lease) string { return l.dir + queueName }

// deleteMarkerOps delete the queue marker if its ModifyIndex is still
// index, that is, if no one queued since it was read.
func deleteMarkerOps(l *lease, index uint64) api.KVTxnOps {
	return api.KVTxnOps{
		{Verb: api.KVCheckIndex, Key: markerKey(l), Index: index},
		{Verb: api.KVDelete, Key: markerKey(l)},
	}
}

// clearQueue deletes a queue marker that st shows with no one queued (its
// last waiter gave up or crashed), unless someone queued since.
func (e *Engine) clearQueue(ctx context.Context, l *lease, st *state) error {
	if st.marker == nil || len(st.waiters) > 0 {
		return nil
	}
	_, _, _, err := e.txn(ctx, deleteMarkerOps(l, st.marker.ModifyIndex))
	return err
}

package consul

import (
	"context"
	"errors"

	"github.com/hashicorp/consul/api"
)

// maxPrune bounds the dead holders one prune transaction removes (Consul
// caps the operations in a transaction).
const maxPrune = 16

// contender is the contender key of lease id under dir.
func contender(dir, id string) string { return dir + contenderHead + id }

// tryShared makes one attempt at a shared grant, following Consul's
// semaphore recipe: in one transaction it checks the lock document against
// the state st it read (check-and-set on its ModifyIndex, or absence), adds
// this holder to it, and locks the holder's contender key with the session.
// The document is locked and at once unlocked in the same transaction so
// that the lock-delay of an invalidated exclusive holder applies to readers
// too. The transaction also raises the key's fencing counter (see
// fenceOps), whose new value is the token, recorded in the holder's entry;
// every shared grant raises it, so each reader's token is its own.
//
// A counted request (l.limit > 0) is refused (held) while l.limit holders
// whose contender key is still held are listed. Listed holders whose
// contender key is gone (their session was invalidated) are dropped in the
// same transaction, which locks and deletes each dead contender key, so the
// grant waits out their lock-delay (outcome delayed). Unless l is queued,
// it also checks that no one queues (outcome queueing), as a writer does.
// The check-and-set on the document makes the count exact: any grant or
// release in between fails the check.
func (e *Engine) tryShared(ctx context.Context, l *lease, st *state) (outcome, error) {
	if st == nil {
		var err error
		if st, err = e.read(ctx, l.dir, 0); err != nil {
			return 0, err
		}
	}
	if st.writerHeld() || st.full(l.limit) {
		return held, nil
	}
	if l.limit > 0 && len(st.dead()) > maxPrune {
		// More dead holders than one grant can drop: prune first.
		out, err := e.prune(ctx, l, st)
		if out == granted {
			out = conflict // pruned: read again
		}
		return out, err
	}
	ops, markerOp, tok := e.sharedOps(l, st)
	ok, resp, out, err := e.txn(ctx, ops)
	if err != nil {
		return 0, err
	}
	if !ok {
		switch failedOp(resp) {
		case 0, 1: // the document's check, the fencing counter's
			return conflict, nil
		case markerOp:
			return queueing, nil
		}
		return out, nil
	}
	if l.index, err = indexOf(resp, l.doc); err != nil {
		return 0, err
	}
	e.fences.put(l, resp, tok)
	l.SetToken(tok)
	l.queued = false
	return granted, nil
}

// sharedOps returns the transaction of tryShared's grant of l after the
// read st, the index of its queue marker check (-1: none) and the token:
// the check on the document, the fencing counter's check and write
// (operations 0 to 2), the marker check, the document written and
// unlocked, the contender key locked, then any dead holders' contender
// keys dropped and l's waiter key deleted.
func (e *Engine) sharedOps(l *lease, st *state) (ops api.KVTxnOps, markerOp int, tok uint64) {
	sid := l.sess.id
	var holders []holder
	if l.limit > 0 {
		var prune api.KVTxnOps
		holders, prune = countedHolders(l, st)
		ops = append(ops, prune...)
	} else {
		holders = append(holders, st.readers()...)
	}
	fence, tok := fenceOps(l, st.fence)
	holders = append(holders, holder{Lease: l.id, Token: tok, Owner: e.cfg.owner, Session: sid, Value: l.value})
	val := document{Mode: "shared", Holders: holders}.encode()
	first := api.KVTxnOp{Verb: api.KVCheckNotExists, Key: l.doc}
	if st.doc != nil {
		first = api.KVTxnOp{Verb: api.KVCheckIndex, Key: l.doc, Index: st.doc.ModifyIndex}
	}
	head := append(api.KVTxnOps{&first}, fence...)
	markerOp = -1
	if l.limit > 0 && !l.queued {
		markerOp = len(head)
		head = append(head, &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: markerKey(l)})
	}
	ops = append(append(head,
		&api.KVTxnOp{Verb: api.KVLock, Key: l.doc, Value: val, Session: sid},
		&api.KVTxnOp{Verb: api.KVUnlock, Key: l.doc, Value: val, Session: sid},
		&api.KVTxnOp{Verb: api.KVLock, Key: contender(l.dir, l.id), Value: []byte(e.cfg.owner), Session: sid},
	), ops...)
	if op := dequeueOp(l); op != nil {
		ops = append(ops, op)
		ops = append(ops, dropQueueOps(l, st)...)
	}
	return ops, markerOp, tok
}

// countedHolders returns the holders a counted grant keeps in the document
// (those whose contender key is held; the caller ensures at most maxPrune
// others) and the operations that lock and delete the dropped ones'
// contender keys, which Consul refuses during their lock-delay.
func countedHolders(l *lease, st *state) ([]holder, api.KVTxnOps) {
	var keep []holder
	var ops api.KVTxnOps
	for _, h := range st.readers() {
		if st.contenders[h.Lease] {
			keep = append(keep, h)
			continue
		}
		c := contender(l.dir, h.Lease)
		ops = append(ops,
			&api.KVTxnOp{Verb: api.KVLock, Key: c, Session: l.sess.id},
			&api.KVTxnOp{Verb: api.KVDelete, Key: c})
	}
	return keep, ops
}

// releaseShared removes l from the lock document (deleting the document
// when l was the last holder) and deletes its contender key, in one
// check-and-set transaction, retried on contention. It reports whether the
// document still listed l.
func (e *Engine) releaseShared(ctx context.Context, l *lease) (bool, error) {
	for range 32 {
		st, err := e.read(ctx, l.dir, 0)
		if err != nil {
			return false, err
		}
		c := contender(l.dir, l.id)
		if !st.has(l.id) {
			if st.contenders[l.id] {
				if _, _, _, err := e.txn(ctx, api.KVTxnOps{{Verb: api.KVDelete, Key: c}}); err != nil {
					return false, err
				}
			}
			return false, nil
		}
		var rest []holder
		for _, h := range st.readers() {
			if h.Lease != l.id {
				rest = append(rest, h)
			}
		}
		ops := api.KVTxnOps{{Verb: api.KVCheckIndex, Key: l.doc, Index: st.doc.ModifyIndex}}
		if len(rest) == 0 {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: l.doc})
		} else {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: l.doc,
				Value: document{Mode: "shared", Holders: rest}.encode()})
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: c})
		ok, _, _, err := e.txn(ctx, ops)
		if err != nil {
			return false, err
		}
		if ok {
			return true, nil
		}
	}
	return false, errors.New("the lock document kept changing")
}

// prune removes dead shared holders (whose contender key is gone, because
// their session was invalidated) from an unlocked document, deleting the
// document if no one is left; an unreadable unlocked document is deleted.
// Each dead contender key is locked and deleted in the same transaction,
// so the prune is refused while the dead holder's lock-delay runs: a writer
// never overlaps a reader that may not know yet that it lost its lease.
func (e *Engine) prune(ctx context.Context, l *lease, st *state) (outcome, error) {
	ops := api.KVTxnOps{{Verb: api.KVCheckIndex, Key: l.doc, Index: st.doc.ModifyIndex}}
	var keep []holder
	dead := 0
	for _, h := range st.readers() {
		if st.contenders[h.Lease] || dead >= maxPrune {
			keep = append(keep, h)
			continue
		}
		dead++
		c := contender(l.dir, h.Lease)
		ops = append(ops,
			&api.KVTxnOp{Verb: api.KVLock, Key: c, Session: l.sess.id},
			&api.KVTxnOp{Verb: api.KVDelete, Key: c})
	}
	if len(keep) == 0 {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: l.doc})
	} else {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: l.doc,
			Value: document{Mode: "shared", Holders: keep}.encode()})
	}
	ok, _, out, err := e.txn(ctx, ops)
	if err != nil {
		return 0, err
	}
	if ok {
		return granted, nil
	}
	return out, nil
}

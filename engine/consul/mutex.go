package consul

import (
	"context"

	"github.com/hashicorp/consul/api"
)

// tryExclusive makes one attempt at an exclusive grant: in one transaction,
// check that the key's document does not exist (and, unless l is queued,
// that no one queues: outcome queueing), raise the key's fencing counter
// (see fenceOps) and lock the document with the session. st is the key as
// last read; without it, the counter is the one the engine's last grant of
// the key wrote (see fenceCache), or else read first. A queued l whose
// last read st showed it as the only waiter also deletes the queue marker
// (see dropQueueOps). Requiring absence (rather than only a free lock)
// keeps two leases of the same engine, which share a session, from both
// getting the key: Consul lets a session re-lock a key it holds. The lock
// verb honours the lock-delay of an invalidated session. The token is the
// counter's new value; a counter changed since fails the transaction
// (outcome conflict: read again).
func (e *Engine) tryExclusive(ctx context.Context, l *lease, st *state) (outcome, error) {
	fence, err := e.fenceFor(ctx, l, st)
	if err != nil {
		return 0, err
	}
	fenceCheck, tok := fenceOps(l, fence)
	val := document{Mode: "exclusive", Holders: []holder{{Lease: l.id, Token: tok, Owner: e.cfg.owner,
		Session: l.sess.id, Value: l.value}}}.encode()
	ops := api.KVTxnOps{{Verb: api.KVCheckNotExists, Key: l.doc}}
	markerOp := -1
	if !l.queued {
		markerOp = len(ops)
		ops = append(ops, &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: markerKey(l)})
	}
	fenceOp := len(ops)
	ops = append(ops, fenceCheck...)
	ops = append(ops, &api.KVTxnOp{Verb: api.KVLock, Key: l.doc, Value: val, Session: l.sess.id})
	if op := dequeueOp(l); op != nil {
		ops = append(ops, op)
		ops = append(ops, dropQueueOps(l, st)...)
	}
	ok, resp, out, err := e.txn(ctx, ops)
	if err != nil {
		return 0, err
	}
	if !ok {
		switch failedOp(resp) {
		case 0:
			return held, nil
		case markerOp:
			return queueing, nil
		case fenceOp:
			e.fences.drop(l.dir)
			return conflict, nil
		}
		if out == conflict {
			return held, nil
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

// fenceFor returns the key's fencing counter for an exclusive attempt:
// st's when the caller read the key, else the one the engine's last grant
// of the key wrote, else a fresh read's (nil: there is none).
func (e *Engine) fenceFor(ctx context.Context, l *lease, st *state) (*api.KVPair, error) {
	if st != nil {
		return st.fence, nil
	}
	if p := e.fences.get(l); p != nil {
		return p, nil
	}
	st, err := e.read(ctx, l.dir, 0)
	if err != nil {
		return nil, err
	}
	return st.fence, nil
}

// releaseExclusive deletes the key's document if it is still the one this
// lease's grant wrote (a check-and-set delete on the grant's index, through the KV
// endpoint: one write, cheaper than a transaction), and reports whether it
// was. The delete is the release and the clean-up in one write: no waiter
// keeps state in the key, and a waiter watching the folder wakes on it.
func (e *Engine) releaseExclusive(ctx context.Context, l *lease) (bool, error) {
	ok, _, err := e.kv.DeleteCAS(&api.KVPair{Key: l.doc, ModifyIndex: l.index}, e.write(ctx))
	return ok, err
}

// takeBackExclusive deletes the key's document if it carries l's id: the
// clean-up after an Acquire whose answer was lost.
func (e *Engine) takeBackExclusive(ctx context.Context, l *lease) error {
	st, err := e.read(ctx, l.dir, 0)
	if err != nil {
		return err
	}
	if !st.writerHeld() || !st.parsedOK || len(st.parsed.Holders) != 1 ||
		st.parsed.Holders[0].Lease != l.id {
		return nil
	}
	_, _, _, err = e.txn(ctx, api.KVTxnOps{
		{Verb: api.KVCheckIndex, Key: l.doc, Index: st.doc.ModifyIndex},
		{Verb: api.KVDelete, Key: l.doc},
	})
	return err
}

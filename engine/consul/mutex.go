package consul

import (
	"context"

	"github.com/hashicorp/consul/api"
)

// tryExclusive makes one attempt at an exclusive grant: in one transaction,
// check that the key's document does not exist (and, unless l is queued,
// that no one queues: outcome queueing) and lock it with the session. A
// queued l whose last read st showed it as the only waiter also deletes
// the queue marker (see dropQueueOps). Requiring absence (rather than only
// a free lock) keeps two leases of the same engine, which share a session,
// from both getting the key: Consul lets a session re-lock a key it holds.
// The lock verb honours the lock-delay of an invalidated session. The
// token is the ModifyIndex of that write, a Raft index, so it only grows.
func (e *Engine) tryExclusive(ctx context.Context, l *lease, st *state) (outcome, error) {
	val := document{Mode: "exclusive",
		Holders: []holder{{Lease: l.id, Owner: e.cfg.owner, Session: l.sess.id, Value: l.value}}}.encode()
	ops := api.KVTxnOps{{Verb: api.KVCheckNotExists, Key: l.doc}}
	if !l.queued {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: markerKey(l)})
	}
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
		switch {
		case failedOp(resp) == 0:
			return held, nil
		case failedOp(resp) == 1 && !l.queued:
			return queueing, nil
		case out == conflict:
			return held, nil
		}
		return out, nil
	}
	if l.token, err = indexOf(resp, l.doc); err != nil {
		return 0, err
	}
	l.queued = false
	return granted, nil
}

// releaseExclusive deletes the key's document if it is still the one this
// lease's grant wrote (a check-and-set delete on the token, through the KV
// endpoint: one write, cheaper than a transaction), and reports whether it
// was. The delete is the release and the clean-up in one write: no waiter
// keeps state in the key, and a waiter watching the folder wakes on it.
func (e *Engine) releaseExclusive(ctx context.Context, l *lease) (bool, error) {
	ok, _, err := e.kv.DeleteCAS(&api.KVPair{Key: l.doc, ModifyIndex: l.token}, e.write(ctx))
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

package consul

import (
	"context"

	"github.com/hashicorp/consul/api"
)

// tryExclusive makes one attempt at an exclusive grant: in one transaction,
// check that the key's document does not exist and lock it with the
// session. Requiring absence (rather than only a free lock) keeps two
// leases of the same engine, which share a session, from both getting the
// key: Consul lets a session re-lock a key it holds. The lock verb honours
// the lock-delay of an invalidated session. The token is the ModifyIndex of
// that write, a Raft index, so it only grows.
func (e *Engine) tryExclusive(ctx context.Context, l *lease) (outcome, error) {
	val := document{Mode: "exclusive", Holders: []holder{{Lease: l.id, Owner: e.cfg.owner, Session: l.sess.id}}}.encode()
	ops := api.KVTxnOps{
		{Verb: api.KVCheckNotExists, Key: l.doc},
		{Verb: api.KVLock, Key: l.doc, Value: val, Session: l.sess.id},
	}
	if op := dequeueOp(l); op != nil {
		ops = append(ops, op)
	}
	ok, resp, out, err := e.txn(ctx, ops)
	if err != nil {
		return 0, err
	}
	if !ok {
		if failedOp(resp) == 0 || out == conflict {
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
// lease's grant wrote (check-index on the token), and reports whether it
// was. The delete is the release and the clean-up in one write: no waiter
// keeps state in the key, and a waiter watching the folder wakes on it.
func (e *Engine) releaseExclusive(ctx context.Context, l *lease) (bool, error) {
	ok, _, _, err := e.txn(ctx, api.KVTxnOps{
		{Verb: api.KVCheckIndex, Key: l.doc, Index: l.token},
		{Verb: api.KVDelete, Key: l.doc},
	})
	return ok, err
}

// takeBackExclusive deletes the key's document if it carries l's id: the
// clean-up after an Acquire whose answer was lost.
func (e *Engine) takeBackExclusive(ctx context.Context, l *lease) error {
	st, err := e.read(ctx, l.dir, 0)
	if err != nil {
		return err
	}
	if !st.writerHeld() || !st.parsedOK || len(st.parsed.Holders) != 1 || st.parsed.Holders[0].Lease != l.id {
		return nil
	}
	_, _, _, err = e.txn(ctx, api.KVTxnOps{
		{Verb: api.KVCheckIndex, Key: l.doc, Index: st.doc.ModifyIndex},
		{Verb: api.KVDelete, Key: l.doc},
	})
	return err
}

package consul

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Releaser = (*Engine)(nil)

// Tombstones. ForceRelease writes, in the transaction that frees a key,
// one KV entry per freed holder,
//
//	P/.released/<holder's session>/<lease id>    (value: the token)
//
// locked with the holder's own session, so Consul deletes it when that
// session ends: it lasts no longer than the lease could have. ".released"
// is no key folder (EncodeKey never writes '.'). After each renewal of
// its session, the holder's engine reads its session's tombstones (one KV
// read), ends those leases with engine.ErrReleasedByOperator and deletes
// the tombstones.
const releasedDir = ".released"

// maxFreeOps bounds the operations of ForceRelease's transaction (Consul
// caps a transaction at 64): the document's check and delete, and two per
// shared holder, so at most 31 shared holders.
const maxFreeOps = 64

// releasedPrefix is the folder of session sid's tombstones.
func (e *Engine) releasedPrefix(sid string) string {
	return e.cfg.prefix + "/" + releasedDir + "/" + sid + "/"
}

// ForceRelease frees key whoever holds it; see engine.Releaser and the
// package documentation ("Force release"). One read of the key's folder,
// then one transaction, checked against the document's index, that
// deletes the lock document (and the shared holders' contender keys) and
// writes each holder's tombstone; a document changed meanwhile is read
// again, up to 32 times. Waiters' blocking queries on the folder return
// at once. The engine's own freed leases end at once; other engines'
// after their session's next renewal.
func (e *Engine) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	bctx, cancel := e.frame.Bind(ctx)
	defer cancel()
	dir := e.keyDir(key)
	for range 32 {
		st, err := e.read(bctx, dir, 0)
		if err != nil {
			return nil, e.opErr(ctx, "force release", key, err)
		}
		hs := st.holders()
		if len(hs) == 0 {
			return nil, fmt.Errorf("%w: %q: nobody holds it", engine.ErrNotHeld, key)
		}
		ops, ids, err := e.freeOps(dir, st)
		if err != nil {
			return nil, e.opErr(ctx, "force release", key, err)
		}
		ok, _, out, err := e.txn(bctx, ops)
		if err != nil {
			return nil, e.opErr(ctx, "force release", key, err)
		}
		if ok {
			e.endReleased(ids)
			return hs, nil
		}
		if out != conflict && out != held {
			return nil, e.opErr(ctx, "force release", key, fmt.Errorf("transaction refused (%d)", out))
		}
	}
	return nil, e.opErr(ctx, "force release", key, errors.New("the lock document kept changing"))
}

// freeOps returns the transaction that frees the key read as st, and the
// lease ids it frees.
func (e *Engine) freeOps(dir string, st *state) (api.KVTxnOps, map[string]bool, error) {
	doc := dir + docName
	ops := api.KVTxnOps{
		{Verb: api.KVCheckIndex, Key: doc, Index: st.doc.ModifyIndex},
		{Verb: api.KVDelete, Key: doc},
	}
	ids := make(map[string]bool)
	tomb := func(h holder, session string, token uint64) {
		ids[h.Lease] = true
		ops = append(ops, &api.KVTxnOp{Verb: api.KVLock, Key: e.releasedPrefix(session) + h.Lease,
			Value: []byte(strconv.FormatUint(token, 10)), Session: session})
	}
	if st.writerHeld() {
		if st.parsedOK && len(st.parsed.Holders) == 1 {
			h := st.parsed.Holders[0]
			tomb(h, st.doc.Session, h.Token)
		}
		return ops, ids, nil
	}
	for _, h := range st.readers() {
		if _, live := st.granted[h.Lease]; !live || h.Session == "" {
			continue // its session is gone: nothing to tell
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: contender(dir, h.Lease)})
		tomb(h, h.Session, h.Token)
	}
	if len(ops) > maxFreeOps {
		return nil, nil, fmt.Errorf("%d shared holders: more than one transaction can free", len(ids))
	}
	return ops, ids, nil
}

// endReleased ends the engine's leases whose ids are in ids with
// engine.ErrReleasedByOperator.
func (e *Engine) endReleased(ids map[string]bool) {
	var ended []*lease
	e.mu.Lock()
	for l := range e.frame.AllLocked() {
		if ids[l.id] {
			ended = append(ended, l)
		}
	}
	e.mu.Unlock()
	endAll(ended, engine.ErrReleasedByOperator)
}

// endAll ends each of ls that nobody else is ending with err.
func endAll(ls []*lease, err error) {
	for _, l := range ls {
		if l.claim() {
			l.finish(err)
		}
	}
}

// checkReleased reads the session's tombstones (one KV read, after a
// renewal), ends the leases they name with engine.ErrReleasedByOperator
// and deletes them. A failed read is tried again after the next renewal.
func (s *session) checkReleased() {
	ctx, cancel := s.ctx(cleanupTimeout)
	defer cancel()
	e := s.e
	s.mu.Lock()
	none := len(s.leases) == 0
	s.mu.Unlock()
	if none {
		return // nothing to tell; Consul deletes the session's tombstones with it
	}
	prefix := e.releasedPrefix(s.id)
	pairs, _, err := e.kv.List(prefix, e.query(ctx))
	if err != nil || len(pairs) == 0 {
		return
	}
	ids := make(map[string]bool, len(pairs))
	var ops api.KVTxnOps
	for _, p := range pairs {
		ids[strings.TrimPrefix(p.Key, prefix)] = true
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: p.Key})
	}
	var ended []*lease
	s.mu.Lock()
	for l := range s.leases {
		if ids[l.id] {
			ended = append(ended, l)
		}
	}
	s.mu.Unlock()
	endAll(ended, engine.ErrReleasedByOperator)
	for len(ops) > 0 {
		n := min(len(ops), maxFreeOps)
		_, _, _, _ = e.txn(ctx, ops[:n])
		ops = ops[n:]
	}
}

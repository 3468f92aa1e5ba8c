package consul

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

var (
	_ engine.Inspector = (*Engine)(nil)
	_ engine.Watcher   = (*Engine)(nil)
)

// Backoff of a Watch after a failed blocking query.
const (
	watchMinBackoff = 100 * time.Millisecond
	watchMaxBackoff = 2 * time.Second
)

// Holders returns the leases that hold key now, in grant order; see
// engine.Inspector. It lists the key's folder once (a consistent read):
// an exclusive holder is the locked lock document's entry, with the
// document's ModifyIndex as its token; shared holders are the entries of
// the unlocked document whose contender key is still held (Consul deletes
// it when the holder's session is invalidated), with the contender key's
// ModifyIndex, written in the grant's transaction, as token. It returns
// engine.ErrClosed after Close.
func (e *Engine) Holders(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	bctx, cancel := e.frame.Bind(ctx)
	defer cancel()
	st, err := e.read(bctx, e.keyDir(key), 0)
	if err != nil {
		if e.frame.Closed() && ctx.Err() == nil {
			return nil, engine.ErrClosed
		}
		return nil, e.opErr(ctx, "holders", key, err)
	}
	return st.holders(), nil
}

// holders returns the holders st shows, in token order. A holder's token
// is the one its grant recorded in its entry of the document; an entry
// written without one (by an engine from before the fencing counter) has
// the ModifyIndex of the document or of its contender key.
func (st *state) holders() []engine.Holder {
	if st.writerHeld() {
		if !st.parsedOK || len(st.parsed.Holders) != 1 {
			return []engine.Holder{{Mode: engine.Exclusive, Token: st.doc.ModifyIndex}}
		}
		h := st.parsed.Holders[0]
		return []engine.Holder{{Mode: engine.Exclusive, Token: cmp.Or(h.Token, st.doc.ModifyIndex),
			Value: h.Value}}
	}
	var hs []engine.Holder
	for _, h := range st.readers() {
		if idx, ok := st.granted[h.Lease]; ok {
			hs = append(hs, engine.Holder{Mode: engine.Shared, Token: cmp.Or(h.Token, idx), Value: h.Value})
		}
	}
	slices.SortFunc(hs, func(a, b engine.Holder) int {
		switch {
		case a.Token < b.Token:
			return -1
		case a.Token > b.Token:
			return 1
		}
		return 0
	})
	return hs
}

// Watch reports changes under key's KV folder (grants, releases, sessions
// invalidated, and waiters joining or leaving, which may change nothing
// for holders); see engine.Watcher. It reads the folder's index before it
// returns, so every change after that is told; then a goroutine makes
// Consul blocking queries on the folder (keys only), each from the index
// the last one returned and bounded by WithRecheck, and sends on the
// channel when the index moves. After a failed query it sends too (a
// change may have been missed), backs off (100ms doubling to 2s) and asks
// again from the index it had. The channel is closed when ctx ends or the
// engine closes; Close waits for the goroutine. It returns an
// *engine.OpError if the first read fails, engine.ErrClosed after Close.
func (e *Engine) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	wctx, cancel := e.frame.Bind(ctx)
	dir := e.keyDir(key)
	index, err := e.folderIndex(wctx, dir, 0)
	if err != nil {
		cancel()
		if e.frame.Closed() && ctx.Err() == nil {
			return nil, engine.ErrClosed
		}
		return nil, e.opErr(ctx, "watch", key, err)
	}
	out := make(chan struct{}, 1)
	watch := func() {
		defer close(out)
		defer cancel()
		e.watchFolder(wctx, dir, index, out)
	}
	if !e.frame.Go(watch) {
		cancel()
		return nil, engine.ErrClosed
	}
	return out, nil
}

// watchFolder makes blocking queries on dir from index until ctx ends,
// sending on out (without blocking) after every change or failure.
func (e *Engine) watchFolder(ctx context.Context, dir string, index uint64, out chan<- struct{}) {
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	b := backoff{watchMinBackoff}
	for ctx.Err() == nil {
		next, err := e.folderIndex(ctx, dir, max(index, 1))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			notify()
			if sleep(ctx, b.d) != nil {
				return
			}
			b.d = min(2*b.d, watchMaxBackoff)
			continue
		}
		b.d = watchMinBackoff
		switch {
		case next > index:
			notify()
		case next < index:
			// The index went backwards (a restored or new server):
			// start over, and tell, as anything may have changed.
			notify()
			next = 0
		}
		index = next
	}
}

// folderIndex lists the key names under dir and returns the Consul index
// of the answer; with index > 0 it is a blocking query that returns when
// something under dir changes after index, or after the wait time.
func (e *Engine) folderIndex(ctx context.Context, dir string, index uint64) (uint64, error) {
	limit := cleanupTimeout
	if index > 0 {
		limit += 2 * e.cfg.recheck
	}
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	q := e.query(rctx)
	if index > 0 {
		q.WaitIndex, q.WaitTime = index, e.cfg.recheck
	}
	_, meta, err := e.kv.Keys(dir, "", q)
	if err != nil {
		return 0, err
	}
	if meta == nil {
		return 0, errors.New("no query metadata")
	}
	return meta.LastIndex, nil
}

package consul

import (
	"context"
	"slices"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Lister = (*Engine)(nil)

// List returns the keys held under prefix; see engine.Lister. One KV
// keys read with separator "/" lists the key folders under
// the engine's prefix whose encoded names begin with EncodeKey(prefix)
// (the encoding keeps prefixes, so the agent filters; Consul does not
// page it). Then, in key order, each folder is read as Holders reads it,
// until limit+1 held keys or 2*limit+16 folders have been read, and More
// is set. Waiters counts the queued waiters of fair mode (WithFair); it is
// -1 without fair mode, whose waiters leave no trace in the KV. It returns
// engine.ErrClosed after Close.
func (e *Engine) List(ctx context.Context, prefix string, limit int) (engine.Inventory, error) {
	prefix, limit, err := engine.CheckList(prefix, limit, e.Limits().MaxKeyLen)
	if err != nil {
		return engine.Inventory{}, err
	}
	if e.frame.Closed() {
		return engine.Inventory{}, engine.ErrClosed
	}
	bctx, cancel := e.frame.Bind(ctx)
	defer cancel()
	top := e.cfg.prefix + "/"
	dirs, _, err := e.kv.Keys(top+EncodeKey(prefix), "/", e.query(bctx))
	if err != nil {
		return engine.Inventory{}, e.opErr(ctx, "list", prefix, err)
	}
	var names []string
	for _, d := range dirs {
		enc, ok := strings.CutSuffix(strings.TrimPrefix(d, top), "/")
		if k, err := DecodeKey(enc); ok && err == nil {
			names = append(names, k)
		}
	}
	var keys []engine.HeldKey
	more := false
	slices.Sort(names)
	for i, k := range names {
		if len(keys) > limit || i >= 2*limit+16 {
			more = true
			break
		}
		st, err := e.read(bctx, e.keyDir(k), 0)
		if err != nil {
			return engine.Inventory{}, e.opErr(ctx, "list", k, err)
		}
		hk := engine.HeldKey{Key: k, Holders: engine.Listed(st.holders()), Waiters: -1}
		if e.cfg.fair {
			hk.Waiters = len(st.waiters)
		}
		keys = append(keys, hk)
	}
	return engine.Collect(keys, prefix, limit, more), nil
}

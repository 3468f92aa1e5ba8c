package memory

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Lister = (*Engine)(nil)

// List returns the keys of the engine's Store held now under prefix; see
// engine.Lister. It reads the Store under its lock, so the listing is a
// snapshot; Granted is when the Store granted each lease (Expires is not
// kept), and Waiters counts the Acquire calls queued on the key. It returns
// engine.ErrClosed after Close.
func (e *Engine) List(ctx context.Context, prefix string, limit int) (engine.Inventory, error) {
	prefix, limit, err := engine.CheckList(prefix, limit, e.Limits().MaxKeyLen)
	if err != nil {
		return engine.Inventory{}, err
	}
	if e.frame.Closed() {
		return engine.Inventory{}, engine.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return engine.Inventory{}, err
	}
	s := e.store
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []engine.HeldKey
	for key, ent := range s.locks {
		if !strings.HasPrefix(key, prefix) || (ent.writer == nil && len(ent.readers) == 0) {
			continue
		}
		keys = append(keys, engine.HeldKey{Key: key, Holders: ent.listed(), Waiters: len(ent.queue)})
	}
	return engine.Collect(keys, prefix, limit, false), nil
}

// listed returns the entry's holders in grant order. Call with the
// Store's mu held.
func (ent *entry) listed() []engine.ListedHolder {
	var out []engine.ListedHolder
	if ent.writer != nil {
		out = append(out, engine.ListedHolder{Holder: ent.writer.holder(), Granted: ent.writer.granted})
	}
	for r := range ent.readers {
		out = append(out, engine.ListedHolder{Holder: r.holder(), Granted: r.granted})
	}
	slices.SortFunc(out, func(a, b engine.ListedHolder) int { return cmp.Compare(a.Token, b.Token) })
	return out
}

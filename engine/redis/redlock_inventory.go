package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Lister = (*Redlock)(nil)

// List returns the keys held on a majority of the nodes under prefix; see
// engine.Lister. Every node is listed at once, as a single-node Engine
// lists (SCAN, bounded the same way), and a key is kept when a quorum of
// nodes list it. Nodes do not share lease ids, so a holder is known by
// its mode and value: an exclusive holder is kept when a quorum of nodes
// hold the key exclusively with one value, and a shared holder when a
// quorum list a reader with its value, with the largest token those nodes
// report (the grant raised every node it reached to it). Two readers with
// one value are therefore shown as one. More is set when any node set it.
// Waiters is -1. A quorum of nodes must answer; otherwise the error is an
// *engine.OpError naming each node's failure.
func (r *Redlock) List(ctx context.Context, prefix string, limit int) (engine.Inventory, error) {
	if _, _, err := engine.CheckList(prefix, limit, r.Limits().MaxKeyLen); err != nil {
		return engine.Inventory{}, err
	}
	if r.frame.Closed() {
		return engine.Inventory{}, engine.ErrClosed
	}
	invs := make([]engine.Inventory, len(r.nodes))
	errs := r.each(func(i int) error {
		nctx, cancel := context.WithTimeout(ctx, r.opts.nodeWait(0)*4)
		defer cancel()
		var err error
		invs[i], err = r.nodes[i].List(nctx, prefix, limit)
		return err
	})
	if countNil(errs) < r.quorum {
		return engine.Inventory{}, r.quorumErr(ctx, "list", prefix,
			fmt.Sprintf("%d of %d nodes listed, %d needed", countNil(errs), len(r.nodes), r.quorum), errs)
	}
	more := false
	for i, inv := range invs {
		more = more || (errs[i] == nil && inv.More)
	}
	p, limit, _ := engine.CheckList(prefix, limit, r.Limits().MaxKeyLen)
	return engine.Collect(majority(invs, r.quorum), p, limit, more), nil
}

// majority returns the keys and holders that at least quorum of the
// nodes' listings show, a holder known by its mode and value, with the
// largest token any node reports for it.
func majority(invs []engine.Inventory, quorum int) []engine.HeldKey {
	type seen struct {
		nodes int
		token uint64
	}
	byKey := make(map[string]map[engine.Holder]*seen)
	for _, inv := range invs {
		for _, k := range inv.Keys {
			if byKey[k.Key] == nil {
				byKey[k.Key] = make(map[engine.Holder]*seen)
			}
			for _, h := range k.Holders {
				id := engine.Holder{Mode: h.Mode, Value: h.Value}
				if byKey[k.Key][id] == nil {
					byKey[k.Key][id] = &seen{}
				}
				s := byKey[k.Key][id]
				s.nodes, s.token = s.nodes+1, max(s.token, h.Token)
			}
		}
	}
	var keys []engine.HeldKey
	for key, holders := range byKey {
		hk := engine.HeldKey{Key: key, Waiters: -1}
		for id, s := range holders {
			if s.nodes >= quorum {
				id.Token = s.token
				hk.Holders = append(hk.Holders, engine.ListedHolder{Holder: id})
			}
		}
		slices.SortFunc(hk.Holders, func(a, b engine.ListedHolder) int { return cmp.Compare(a.Token, b.Token) })
		keys = append(keys, hk)
	}
	return keys
}

package etcd

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ engine.Lister = (*Engine)(nil)

// List bounds: a range read returns at most listPage entries, and List
// reads at most listPages of them (then it sets More). listPage is a
// variable so that a test can make every entry a page of its own.
var (
	listPage  int64 = 1000
	listPages       = 1000
)

// List returns the keys held under prefix; see engine.Lister. It reads the
// queue entries under the engine's prefix followed by prefix in key order,
// listPage entries per range request, every page at the revision of the
// first (one snapshot), until it has seen limit+1 lock keys. Each key's
// entries, ordered by create revision, give its holders by the grant rule
// of Holders and its Waiters (the entries that do not hold). Entries of an
// expired etcd lease are gone from the server, so never listed. etcd keeps
// no grant time; Granted and Expires are zero. It returns
// engine.ErrClosed after Close.
func (e *Engine) List(ctx context.Context, prefix string, limit int) (engine.Inventory, error) {
	prefix, limit, err := engine.CheckList(prefix, limit, e.Limits().MaxKeyLen)
	if err != nil {
		return engine.Inventory{}, err
	}
	if e.frame.Closed() {
		return engine.Inventory{}, engine.ErrClosed
	}
	bctx, cancel := e.bound(ctx)
	defer cancel()
	cli, err := e.connect(bctx)
	if err != nil {
		return engine.Inventory{}, e.opError(ctx, "list", prefix, err)
	}
	queues, more, err := e.readQueues(bctx, cli, e.prefix+prefix, limit+1)
	if err != nil {
		return engine.Inventory{}, e.opError(ctx, "list", prefix, err)
	}
	keys := make([]engine.HeldKey, 0, len(queues))
	for key, q := range queues {
		slices.SortFunc(q, func(a, b entry) int { return cmp.Compare(a.rev, b.rev) })
		hs := holders(q)
		keys = append(keys, engine.HeldKey{Key: key, Holders: engine.Listed(hs), Waiters: len(q) - len(hs)})
	}
	return engine.Collect(keys, prefix, limit, more), nil
}

// readQueues pages through the entries under from, grouping them by lock
// key, until it has max keys (the entries of a key beyond that are not
// read) or listPages pages; more reports that it stopped early.
func (e *Engine) readQueues(ctx context.Context, cli *clientv3.Client, from string,
	max int) (map[string][]entry, bool, error) {
	end := clientv3.GetPrefixRangeEnd(from)
	queues := make(map[string][]entry)
	start, rev := from, int64(0)
	for range listPages {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, start, opts...)
		if err != nil {
			return nil, false, err
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			key, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), e.prefix), sep)
			if !ok {
				continue
			}
			if _, seen := queues[key]; !seen && len(queues) == max {
				return queues, true, nil
			}
			if en, ok := parseEntry(e.queueRange(key), string(kv.Key), kv.CreateRevision, kv.Value); ok {
				queues[key] = append(queues[key], en)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return queues, false, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return queues, true, nil
}

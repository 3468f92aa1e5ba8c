package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ engine.Releaser = (*Engine)(nil)

// ReleaseMarkTTL is how long a force release's marks live (the etcd lease
// they are attached to): a holder whose engine reads them within that
// time is told engine.ErrReleasedByOperator; one whose process was paused
// longer is told engine.ErrLeaseLost.
const ReleaseMarkTTL = time.Hour

// releaseTries bounds the read-and-delete rounds of a force release that
// races with grants and releases of the key.
const releaseTries = 5

// markRange is the range of the force-release marks of the entries of the
// etcd lease id: "<prefix>\x01released/<id, 16 hex digits>/". A mark's
// name ends in the freed entry's create revision (its lease's token). No
// queue range holds it: a lock key holds no control character.
func (e *Engine) markRange(id clientv3.LeaseID) string {
	return fmt.Sprintf("%s\x01released/%016x/", e.prefix, uint64(id))
}

// ForceRelease frees key whoever holds it; see engine.Releaser. It reads
// the key's queue and, in one transaction that compares each holder's
// create revision, deletes the holders' entries and puts a mark for each,
// under the holder's etcd lease id, on an etcd lease of ReleaseMarkTTL of
// its own. The next waiter watches the deleted entry, so it is granted at
// once; its token, its entry's create revision, is above the freed ones.
// A holder's engine reads its marks at every renewal of its etcd lease
// (every third of the lease TTL) and before it declares that lease lost,
// so a holder is told within a third of the TTL, or when its process
// resumes from a pause. If the queue changes between the read and the
// transaction, it reads again, releaseTries times at most. It returns
// engine.ErrClosed after Close.
func (e *Engine) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	bctx, cancel := e.bound(ctx)
	defer cancel()
	cli, err := e.connect(bctx)
	if err != nil {
		return nil, e.opError(ctx, "force release", key, err)
	}
	var markLease clientv3.LeaseID
	for range releaseTries {
		queue := e.queueRange(key)
		resp, err := cli.Get(bctx, queue, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return nil, e.opError(ctx, "force release", key, err)
		}
		entries := parseQueue(queue, resp.Kvs)
		hs := holders(entries)
		if len(hs) == 0 {
			return nil, fmt.Errorf("%w: %q is free", engine.ErrNotHeld, key)
		}
		if markLease == 0 {
			g, err := cli.Grant(bctx, int64(ReleaseMarkTTL/time.Second))
			if err != nil {
				return nil, e.opError(ctx, "force release", key, err)
			}
			markLease = g.ID
		}
		held := make(map[uint64]bool, len(hs))
		for _, h := range hs {
			held[h.Token] = true
		}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, en := range entries {
			if !held[uint64(en.rev)] {
				continue
			}
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(en.name), "=", en.rev))
			ops = append(ops, clientv3.OpDelete(en.name),
				clientv3.OpPut(e.markName(queue, en), key, clientv3.WithLease(markLease)))
		}
		tx, err := cli.Txn(bctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, e.opError(ctx, "force release", key, err)
		}
		if tx.Succeeded {
			return hs, nil
		}
	}
	return nil, e.opError(ctx, "force release", key,
		fmt.Errorf("the queue kept changing over %d tries", releaseTries))
}

// markName is the force-release mark of entry en of queue: the mark range
// of the etcd lease id in its name, and its create revision.
func (e *Engine) markName(queue string, en entry) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(en.name, queue), "/")
	return fmt.Sprintf("%s\x01released/%s/%d", e.prefix, id, en.rev)
}

// tellReleased reads ep's force-release marks and ends each lease of ep
// that one names with engine.ErrReleasedByOperator, then deletes the
// marks it read. A failed read tells nobody: the next renewal reads again.
func (e *Engine) tellReleased(ctx context.Context, ep *epoch) {
	from := e.markRange(ep.id)
	resp, err := e.c().Get(ctx, from, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	freed := make(map[uint64]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if rev, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), from), 10, 64); err == nil {
			freed[rev] = true
		}
	}
	e.mu.Lock()
	var told []*lease
	for l := range e.frame.AllLocked() {
		if l.ep == ep && freed[l.Token()] {
			told = append(told, l)
		}
	}
	e.mu.Unlock()
	for _, l := range told {
		if l.finish(fmt.Errorf("%w: its entry of %q was deleted", engine.ErrReleasedByOperator, l.Key())) {
			ep.give(l.slot)
		}
	}
	_, _ = e.c().Delete(ctx, from, clientv3.WithPrefix())
}

// releasedMark reports whether a force release left a mark for l.
func (e *Engine) releasedMark(ctx context.Context, l *lease) bool {
	resp, err := e.c().Get(ctx, fmt.Sprintf("%s%d", e.markRange(l.ep.id), l.Token()), clientv3.WithCountOnly())
	return err == nil && resp.Count > 0
}

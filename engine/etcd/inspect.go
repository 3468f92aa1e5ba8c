package etcd

import (
	"context"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Holders returns the leases that hold key now, in grant order; see
// engine.Inspector. It reads the key's queue once (a linearizable read)
// and applies the grant rule of Acquire to it, so an entry whose turn has
// come is listed even if its waiter has not yet seen the change. Entries of
// an expired etcd lease are gone from the server, so never listed. It
// returns engine.ErrClosed after Close.
func (e *Engine) Holders(ctx context.Context, key string) ([]engine.Holder, error) {
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
		return nil, e.opError(ctx, "holders", key, err)
	}
	queue := e.queueRange(key)
	resp, err := cli.Get(bctx, queue, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, e.opError(ctx, "holders", key, err)
	}
	return holders(parseQueue(queue, resp.Kvs)), nil
}

// Watch reports changes to key's queue (grants, releases, expiries, and
// waiters joining or leaving, which may change nothing for holders) from
// an etcd watch on its range; see engine.Watcher. It reads the store's
// revision before it returns and watches from the next one, so a change
// made after Watch returns is reported even if the watch itself is set up
// a moment later. If the watch breaks it is opened again from the last
// revision it reported, after a send on the channel. The channel is
// closed when ctx ends or the engine closes. It returns engine.ErrClosed
// after Close.
func (e *Engine) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	queue := e.queueRange(key)
	rev, err := e.revision(ctx, queue)
	if err != nil {
		return nil, e.opError(ctx, "watch", key, err)
	}
	wctx, cancel := e.frame.Bind(ctx)
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	watch := func() {
		defer close(out)
		defer cancel()
		next := rev + 1
		for wctx.Err() == nil {
			if cli, err := e.connect(wctx); err == nil {
				for resp := range cli.Watch(wctx, queue, clientv3.WithPrefix(), clientv3.WithRev(next)) {
					next = nextRevision(resp, next)
					notify()
				}
			}
			notify()
			select {
			case <-wctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if !e.frame.Go(watch) {
		cancel()
		return nil, engine.ErrClosed
	}
	return out, nil
}

// revision returns the store's revision, read with the range queue (a
// count-only read, bounded like every call).
func (e *Engine) revision(ctx context.Context, queue string) (int64, error) {
	bctx, cancel := e.bound(ctx)
	defer cancel()
	cli, err := e.connect(bctx)
	if err != nil {
		return 0, err
	}
	resp, err := cli.Get(bctx, queue, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// nextRevision is where a watch that received resp goes on from: after
// its last event, or from the oldest revision left when the one it asked
// for was compacted away (the changes in between are lost, and the send
// that follows resp stands for them).
func nextRevision(resp clientv3.WatchResponse, next int64) int64 {
	if resp.CompactRevision != 0 {
		return resp.CompactRevision
	}
	if n := len(resp.Events); n > 0 {
		return resp.Events[n-1].Kv.ModRevision + 1
	}
	return next
}

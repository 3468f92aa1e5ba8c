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
// an etcd watch on its range; see engine.Watcher. If the watch breaks it
// is opened again, after a send on the channel. The channel is closed when
// ctx ends or the engine closes. It returns engine.ErrClosed after Close.
func (e *Engine) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	wctx, cancel := e.frame.Bind(ctx)
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	queue := e.queueRange(key)
	watch := func() {
		defer close(out)
		defer cancel()
		for wctx.Err() == nil {
			if cli, err := e.connect(wctx); err == nil {
				for range cli.Watch(wctx, queue, clientv3.WithPrefix()) {
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

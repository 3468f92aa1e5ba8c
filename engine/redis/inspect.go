package redis

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
)

// Holders returns the leases that hold key now, in grant order; see
// engine.Inspector. One read-only script reads the exclusive holder (its
// token is the fencing counter, which no grant can raise while it holds,
// and its value is in :x) and the readers whose expiry, by the server's
// clock, is still ahead (token and value from :v), so an expired lease is
// never listed even before Redis removes it. It returns engine.ErrClosed
// after Close.
func (e *Engine) Holders(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	return e.holdersAt(ctx, key, e.keysOf(key))
}

// holdersAt runs the holders script on k, the keys of key (which names the
// key in errors).
func (e *Engine) holdersAt(ctx context.Context, key string, k lockKeys) ([]engine.Holder, error) {
	rctx, cancel := e.roundTrip(ctx)
	defer cancel()
	v, err := holdersScript.Run(rctx, e.c, []string{k.w, k.r, k.f, k.x, k.v}).Slice()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, e.opError(ctx, "holders", key, err)
	}
	hs, err := parseHolders(v)
	if err != nil {
		return nil, e.opError(ctx, "holders", key, err)
	}
	return hs, nil
}

// Watch timing: the mark :wt that makes the scripts publish lives
// watchMarkTTL and every Watch renews it every watchRefresh.
const (
	watchMarkTTL = 15 * time.Second
	watchRefresh = 5 * time.Second
)

// Watch reports changes to key's holders from Redis pub/sub; see
// engine.Watcher. It subscribes to the key's channel on the engine's one
// pub/sub connection and sets the key's watch mark :wt, which it renews
// while it runs; every grant and release script that finds the mark
// publishes on the key's channel (see the package doc, "Watch"). Both are
// in place before Watch returns. After go-redis reconnects and subscribes
// again, the channel receives a value, since a message may have been lost.
// An expiry (a holder that crashed) publishes nothing: callers re-read on
// their interval, as engine.Watcher says. The channel is closed when ctx
// ends or the engine closes. It returns engine.ErrClosed after Close.
func (e *Engine) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	k := e.keysOf(key)
	wctx, cancel := e.frame.Bind(ctx)
	w := e.hub.joinWatch(wctx, k.c)
	if err := e.markWatched(wctx, k.wt); err != nil {
		e.hub.leave(w)
		cancel()
		if e.frame.Closed() {
			return nil, engine.ErrClosed
		}
		return nil, e.opError(ctx, "watch", key, err)
	}
	out := make(chan struct{}, 1)
	run := func() {
		defer close(out)
		defer cancel()
		defer e.hub.leave(w)
		t := time.NewTicker(watchRefresh)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-w.wake:
				select {
				case out <- struct{}{}:
				default:
				}
			case <-t.C:
				_ = e.markWatched(wctx, k.wt) // a failure costs notifications until the next refresh
			}
		}
	}
	if !e.frame.Go(run) {
		e.hub.leave(w)
		cancel()
		return nil, engine.ErrClosed
	}
	return out, nil
}

// markWatched sets the key's watch mark wt for watchMarkTTL.
func (e *Engine) markWatched(ctx context.Context, wt string) error {
	rctx, cancel := e.roundTrip(ctx)
	defer cancel()
	pipe := e.c.Pipeline()
	pipe.Set(rctx, wt, "1", watchMarkTTL)
	_, err := pipe.Exec(rctx)
	return err
}

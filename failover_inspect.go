package cerberus

import (
	"context"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

var (
	_ engine.Inspector = (*Failover)(nil)
	_ engine.Watcher   = (*Failover)(nil)
)

// Holders lists key's holders on the active engine, with their tokens in
// the Failover's epoch-carrying form (as its leases' Token); see
// engine.Inspector. It returns ErrInvalidRequest when the active engine
// cannot list holders.
func (f *Failover) Holders(ctx context.Context, key string) ([]engine.Holder, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, engine.ErrClosed
	}
	ne, epoch := f.engines[f.active], f.epoch
	f.mu.Unlock()
	in := inspectorOf(ne.Engine)
	if in == nil {
		return nil, fmt.Errorf("%w: engine %s cannot list a key's holders", engine.ErrInvalidRequest, ne.Name)
	}
	hs, err := in.Holders(ctx, key)
	for i := range hs {
		hs[i].Token |= epoch << tokenBits
	}
	return hs, err
}

// failoverWatchCheck is how often a Failover watch looks for a switch.
const failoverWatchCheck = 250 * time.Millisecond

// Watch reports changes to key's holders on the active engine, and every
// switch (which ends every lease); see engine.Watcher. After a switch it
// watches the new engine. While the active engine is no engine.Watcher it
// reports switches only. It validates key first.
func (f *Failover) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := engine.CheckKey(key, f.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, engine.ErrClosed
	}
	f.mu.Unlock()
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(out)
		tick := time.NewTicker(failoverWatchCheck)
		defer tick.Stop()
		for ctx.Err() == nil {
			f.mu.Lock()
			closed, ne, epoch := f.closed, f.engines[f.active], f.epoch
			f.mu.Unlock()
			if closed {
				return
			}
			wctx, cancel := context.WithCancel(ctx)
			var inner <-chan struct{}
			if w := watcherOf(ne.Engine); w != nil {
				inner, _ = w.Watch(wctx, key)
			}
		follow:
			for {
				select {
				case <-ctx.Done():
					break follow
				case _, ok := <-inner:
					if !ok {
						inner = nil
					}
					notify()
				case <-tick.C:
					f.mu.Lock()
					switched := f.epoch != epoch || f.closed
					f.mu.Unlock()
					if switched {
						notify()
						break follow
					}
				}
			}
			cancel()
		}
	}()
	return out, nil
}

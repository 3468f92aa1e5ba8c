package failover

import (
	"context"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

var (
	_ engine.Inspector = (*Manager)(nil)
	_ engine.Watcher   = (*Manager)(nil)
)

// Holders lists key's holders on the active engine, with their tokens in
// the Manager's epoch-carrying form (as its leases' Token); see
// engine.Inspector. It returns ErrInvalidRequest when the active engine
// cannot list holders.
func (m *Manager) Holders(ctx context.Context, key string) ([]engine.Holder, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, engine.ErrClosed
	}
	ne, epoch := m.engines[m.active], m.epoch
	m.mu.Unlock()
	in := engine.InspectorOf(ne.Engine)
	if in == nil {
		return nil, fmt.Errorf("%w: engine %s cannot list a key's holders", engine.ErrInvalidRequest, ne.Name)
	}
	hs, err := in.Holders(ctx, key)
	for i := range hs {
		hs[i].Token |= epoch << tokenBits
	}
	return hs, err
}

// watchCheck is how often a Manager's Watch looks for a switch.
const watchCheck = 250 * time.Millisecond

// Watch reports changes to key's holders on the active engine, and every
// switch (which ends every lease); see engine.Watcher. After a switch it
// watches the new engine. While the active engine is no engine.Watcher it
// reports switches only. It validates key first.
func (m *Manager) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := engine.CheckKey(key, m.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, engine.ErrClosed
	}
	m.mu.Unlock()
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(out)
		tick := time.NewTicker(watchCheck)
		defer tick.Stop()
		for ctx.Err() == nil {
			m.mu.Lock()
			closed, ne, epoch := m.closed, m.engines[m.active], m.epoch
			m.mu.Unlock()
			if closed {
				return
			}
			wctx, cancel := context.WithCancel(ctx)
			var inner <-chan struct{}
			if w := engine.WatcherOf(ne.Engine); w != nil {
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
					m.mu.Lock()
					switched := m.epoch != epoch || m.closed
					m.mu.Unlock()
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

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
// switch (which ends every lease); see engine.Watcher. It opens the active
// engine's watch before it returns, so a change made right after it is
// told; after a switch it watches the new engine. While the active engine
// is no engine.Watcher it reports switches only. It validates key first.
func (m *Manager) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := engine.CheckKey(key, m.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	cur, ok := m.watchActive(ctx, key)
	if !ok {
		return nil, engine.ErrClosed
	}
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
		for {
			m.follow(ctx, cur, tick.C, notify)
			cur.cancel()
			if ctx.Err() != nil {
				return
			}
			if cur, ok = m.watchActive(ctx, key); !ok {
				return
			}
		}
	}()
	return out, nil
}

// watching is the watch of one epoch's active engine.
type watching struct {
	epoch  uint64
	inner  <-chan struct{} // nil when that engine is no Watcher
	cancel context.CancelFunc
}

// watchActive opens the watch of key on the active engine, or reports
// that the manager is closed.
func (m *Manager) watchActive(ctx context.Context, key string) (watching, bool) {
	m.mu.Lock()
	closed, ne, epoch := m.closed, m.engines[m.active], m.epoch
	m.mu.Unlock()
	if closed {
		return watching{}, false
	}
	wctx, cancel := context.WithCancel(ctx)
	w := watching{epoch: epoch, cancel: cancel}
	if in := engine.WatcherOf(ne.Engine); in != nil {
		w.inner, _ = in.Watch(wctx, key)
	}
	return w, true
}

// follow tells every change cur reports until ctx ends or, checked on
// every tick, the manager switched or closed (told too).
func (m *Manager) follow(ctx context.Context, cur watching, tick <-chan time.Time, notify func()) {
	inner := cur.inner
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-inner:
			if !ok {
				inner = nil
			}
			notify()
		case <-tick:
			m.mu.Lock()
			switched := m.epoch != cur.epoch || m.closed
			m.mu.Unlock()
			if switched {
				notify()
				return
			}
		}
	}
}

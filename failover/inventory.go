package failover

import (
	"context"
	"fmt"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Lister = (*Manager)(nil)

// List lists the keys held under prefix on the active engine, with their
// tokens in the Manager's epoch-carrying form (as its leases' Token); see
// engine.Lister. It checks its arguments before anything else; it returns
// an error wrapping engine.ErrInvalidRequest when the active engine cannot
// list. The keys still held on the other engines, such as the one the
// Manager just left, are not listed: ask those engines (cerberusctl locks
// does, for every engine of a configuration).
func (m *Manager) List(ctx context.Context, prefix string, limit int) (engine.Inventory, error) {
	if _, _, err := engine.CheckList(prefix, limit, m.Limits().MaxKeyLen); err != nil {
		return engine.Inventory{}, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return engine.Inventory{}, engine.ErrClosed
	}
	ne, epoch := m.engines[m.active], m.epoch
	m.mu.Unlock()
	ls := engine.ListerOf(ne.Engine)
	if ls == nil {
		return engine.Inventory{}, fmt.Errorf("%w: engine %s cannot list held keys", engine.ErrInvalidRequest, ne.Name)
	}
	inv, err := ls.List(ctx, prefix, limit)
	for i := range inv.Keys {
		for j := range inv.Keys[i].Holders {
			inv.Keys[i].Holders[j].Token |= epoch << tokenBits
		}
	}
	return inv, err
}

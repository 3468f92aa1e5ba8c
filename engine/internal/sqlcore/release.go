package sqlcore

import (
	"context"
	"fmt"
	"slices"

	"github.com/cerberus-go/cerberus/engine"
)

// Freed is a lease that Dialect.Free cleared: its holder, as Holders
// reports it, and its owner value, which its tombstone names.
type Freed struct {
	engine.Holder
	Owner string
}

// ForceRelease frees key whoever holds it (engine.Releaser), as a call
// that Close waits for: one Dialect.Free clears the key's unexpired writer
// row and reader rows and leaves a tombstone naming each one's owner, in
// the same transaction, which lasts that lease's TTL from then on the
// server's clock. A lease of another process learns of it at its next
// renewal, which finds its row gone and the tombstone there (see
// renewSome); a lease of this engine is ended at once. The engine's own
// waiters on key look at once; other processes' waiters at their next
// poll. The freed leases are returned in token order (grant order). It
// checks key against maxKeyLen before any I/O; a key nobody holds is
// engine.ErrNotHeld.
func (c *Core) ForceRelease(ctx context.Context, key string, maxKeyLen int) ([]engine.Holder, error) {
	qctx, exit, err := c.EnterKey(ctx, key, maxKeyLen)
	if err != nil {
		return nil, err
	}
	defer exit()
	freed, err := c.d.Free(qctx, key)
	if err != nil {
		return nil, c.d.OpErr(ctx, "force release", key, err)
	}
	if len(freed) == 0 {
		return nil, fmt.Errorf("%w: %q: nobody holds it", engine.ErrNotHeld, key)
	}
	slices.SortFunc(freed, func(a, b Freed) int { return cmpUint(a.Token, b.Token) })
	owners := make(map[string]bool, len(freed))
	out := make([]engine.Holder, len(freed))
	for i, f := range freed {
		owners[f.Owner] = true
		out[i] = f.Holder
	}
	c.endReleased(owners)
	c.line.kick(key)
	return out, nil
}

// endReleased ends the engine's lease-strategy leases whose owner values
// are in owners with engine.ErrReleasedByOperator.
func (c *Core) endReleased(owners map[string]bool) {
	var ended []*lease
	c.Mu.Lock()
	for x := range c.Frame.AllLocked() {
		if l, ok := x.(*lease); ok && owners[l.owner] {
			ended = append(ended, l)
		}
	}
	c.Mu.Unlock()
	for _, l := range ended {
		l.end(engine.ErrReleasedByOperator, false)
	}
}

// lostErr is the error a renewal that no longer found the leases of lost
// ends them with: engine.ErrReleasedByOperator for those whose tombstone
// (Dialect.Released) is there, engine.ErrLeaseLost for the others and
// for all of them if the tombstones cannot be read within ctx.
func (c *Core) lostErr(ctx context.Context, lost []*lease) func(*lease) error {
	owners := make([]string, len(lost))
	for i, l := range lost {
		owners[i] = l.owner
	}
	released, err := c.d.Released(ctx, owners)
	return func(l *lease) error {
		if err == nil && released[l.owner] {
			return engine.ErrReleasedByOperator
		}
		return engine.ErrLeaseLost
	}
}

package kit

import "github.com/cerberus-go/cerberus/engine"

// LeaseCore is what every engine lease holds and reports the same way: its
// key, mode and fencing token, and the Signal that says when and why it
// ended. Embed it, by value, in an engine's lease type and the type has the
// five accessors engine.Lease asks for besides Release (Key, Mode, Token,
// and Done and Err from the Signal); the engine reaches the Signal as the
// field Signal. Make it with NewLeaseCore inside the lease's composite
// literal; it must not be copied after that.
type LeaseCore struct {
	Signal // the lease's end: Done, Err, Close, NotHeld

	key   string
	token uint64
	mode  engine.Mode
}

// NewLeaseCore returns the core of a lease of key in mode, whose Signal
// calls onLost (which may be nil) as NewSignal does. The token is 0 until
// SetToken.
func NewLeaseCore(key string, mode engine.Mode, onLost func(error)) LeaseCore {
	return LeaseCore{Signal: Signal{onLost: onLost}, key: key, mode: mode}
}

// Key returns the lock key, as given to Acquire.
func (c *LeaseCore) Key() string { return c.key }

// Mode returns the mode the lease was granted in.
func (c *LeaseCore) Mode() engine.Mode { return c.mode }

// Token returns the fencing token of the grant.
func (c *LeaseCore) Token() uint64 { return c.token }

// SetToken records the fencing token of the grant. Call it before the lease
// is shared with another goroutine: Token does not synchronise.
func (c *LeaseCore) SetToken(t uint64) { c.token = t }

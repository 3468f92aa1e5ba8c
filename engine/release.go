package engine

import "context"

// Releaser is implemented by an Engine that can free a key whoever holds
// it: the operator's force release, for a holder that is hung but still
// renewing, or that nobody can reach.
type Releaser interface {
	// ForceRelease frees key on the server in every mode, so that the
	// next waiter is granted it at once, with a higher token than any
	// lease it freed. It returns the leases it freed, in grant order.
	//
	// A lease it freed, in any process, is told no later than its next
	// renewal (at once where the server tells holders, and at once in this
	// process): its Done closes and Err wraps ErrReleasedByOperator. Its
	// later Release or Renew returns ErrNotHeld and changes nothing, so a
	// released holder never frees the next holder's grant.
	//
	// It validates key first, wrapping ErrInvalidKey, and does no I/O for
	// a bad key. A key that nobody holds is an error wrapping ErrNotHeld,
	// and nothing changes. Server failures are *OpError, like Acquire.
	ForceRelease(ctx context.Context, key string) ([]Holder, error)
}

// ReleaserOf returns the Releaser of e, looking through wrappers
// (Wrapper), or nil when e has none.
func ReleaserOf(e Engine) Releaser { return lookThrough[Releaser](e) }

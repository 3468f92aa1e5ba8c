package cerberus

import (
	"context"
	"sync/atomic"
)

type ownerKey struct{}

var lastOwner atomic.Uint64

// WithOwner returns a context carrying a new owner identity. Locks taken
// with contexts of the same owner re-enter instead of blocking each other;
// see the package documentation. Calling WithOwner on a context that already
// has an owner replaces it with a new one.
func WithOwner(ctx context.Context) context.Context {
	return context.WithValue(ctx, ownerKey{}, lastOwner.Add(1))
}

// ownerOf returns the context's owner, or 0 for none.
func ownerOf(ctx context.Context) uint64 {
	id, _ := ctx.Value(ownerKey{}).(uint64)
	return id
}

package engine

import (
	"errors"
	"strings"
)

// Sentinel errors. Engines wrap them; callers test them with errors.Is.
var (
	// ErrNotAcquired: the lock is held elsewhere (TryLock), or the wait ended
	// before it was granted (joined with ctx.Err()).
	ErrNotAcquired = errors.New("cerberus: not acquired")
	// ErrNotHeld: a release or renewal by a lease that no longer holds its
	// key. Nothing was changed.
	ErrNotHeld = errors.New("cerberus: lock not held")
	// ErrLeaseLost: the lease ended without being released: it expired, a
	// renewal failed or found another owner, or the session was lost.
	ErrLeaseLost = errors.New("cerberus: lease lost")
	// ErrReleased: the lease ended because its holder released it.
	ErrReleased = errors.New("cerberus: lease released")
	// ErrEngineSwitched: the lease ended because the manager moved to
	// another engine.
	ErrEngineSwitched = errors.New("cerberus: engine switched")
	// ErrClosed: the engine or client was closed.
	ErrClosed = errors.New("cerberus: closed")
	// ErrInvalidKey: the key is empty, too long, or cannot be represented.
	ErrInvalidKey = errors.New("cerberus: invalid key")
	// ErrInvalidTTL: the TTL is outside the engine's Limits.
	ErrInvalidTTL = errors.New("cerberus: invalid ttl")
	// ErrInvalidRequest: any other malformed request, such as an unknown mode.
	ErrInvalidRequest = errors.New("cerberus: invalid request")
	// ErrUnavailable: the server could not be reached or did not answer in
	// time. Engines return it inside an *OpError.
	ErrUnavailable = errors.New("cerberus: engine unavailable")
)

// OpError reports a failed operation on an engine's server. It never holds
// credentials: engines put addresses and keys in it, not DSNs or tokens.
type OpError struct {
	Engine string // engine name, such as "redis"
	Op     string // "acquire", "release", "renew", "ping", ...
	Key    string // the lock key, if any
	Err    error  // the cause; often wraps ErrUnavailable
}

// Error formats as "cerberus: redis acquire "key": cause".
func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString("cerberus: ")
	b.WriteString(e.Engine)
	b.WriteByte(' ')
	b.WriteString(e.Op)
	if e.Key != "" {
		b.WriteString(" ")
		b.WriteString(quote(e.Key))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

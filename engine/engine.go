package engine

import (
	"context"
	"time"
)

// Mode says whether a lease excludes every other lease on its key or only
// exclusive ones.
type Mode uint8

const (
	// Exclusive excludes every other lease on the key: a write lock.
	Exclusive Mode = iota
	// Shared overlaps other Shared leases on the key and excludes Exclusive
	// ones: a read lock.
	Shared
)

// String returns "exclusive" or "shared".
func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return "mode(" + itoa(uint64(m)) + ")"
}

// Request describes one acquisition.
type Request struct {
	// Key names the lock. Engines accept at least the keys CheckKey accepts
	// with their Limits; a key they cannot represent is ErrInvalidKey.
	Key string
	// Mode is Exclusive or Shared.
	Mode Mode
	// TTL is the lease period. Without Renew the lease expires TTL after the
	// grant; with Renew it is extended before it runs out, and TTL bounds how
	// long a crashed holder keeps the key.
	TTL time.Duration
	// Renew keeps the lease alive until it is released (a watchdog).
	Renew bool
	// Wait blocks until the lock is granted or ctx ends. Without Wait the
	// engine makes one attempt and returns ErrNotAcquired if the key is held.
	Wait bool
	// Limit, when above 0, makes a Shared request counted: it is granted
	// only while fewer than Limit Shared leases hold the key, so that the key
	// is a semaphore of Limit permits (Exclusive leases still exclude every
	// Shared one, and Shared ones every Exclusive one). Each grant still gets
	// its own token, strictly above every earlier grant's on the key. Waiters
	// are served in arrival order: a counted waiter does not pass an earlier
	// waiter of either mode. The count is checked against the Limit of the
	// request being granted; every holder of a key should ask the same Limit.
	// 0 means no limit. Limit must be 0 for an Exclusive request, at most
	// MaxLimit, and 0 on an engine whose Limits().Counted is false;
	// CheckRequest says so with ErrInvalidRequest.
	Limit int
	// Value is a small label the engine stores with the lease on the server,
	// readable by anyone through Inspector.Holders while the lease holds:
	// an election candidate's identity, a permit holder's name. At most
	// MaxValueLen bytes of valid UTF-8 without control characters; it may be
	// empty.
	Value string
	// OnLost, if set, is called at most once, before Done closes, when
	// the lease is lost for any reason other than its own release: expiry,
	// failed renewal, session loss, engine close. It receives the same error
	// as Lease.Err and must not block.
	OnLost func(err error)
}

// Limits are the bounds an engine enforces before any I/O.
type Limits struct {
	// MaxKeyLen is the longest key, in bytes, the engine stores.
	MaxKeyLen int
	// MinTTL and MaxTTL bound Request.TTL.
	MinTTL, MaxTTL time.Duration
	// Floor is how long, at most, a holder that stops talking (crashed,
	// paused by a GC or SIGSTOP, cut off) may keep its key on this engine
	// whatever the lease period it asked for, when that bound comes from
	// the server (a session timeout, a session TTL plus lock-delay) rather
	// than from Request.TTL; 0 means every lease period within [MinTTL,
	// MaxTTL] is honoured. An engine whose Floor is above the common
	// MinTTL either refuses shorter periods (MinTTL == Floor) or accepts
	// them and documents that a silent holder keeps its key up to Floor.
	// The failover manager fences a switch by it.
	Floor time.Duration
	// Counted reports whether the engine honours Request.Limit natively.
	// CheckRequest refuses a request with a Limit from an engine that does
	// not, so that no engine grants more than Limit permits by ignoring it.
	Counted bool
	// ExclusiveOnly reports that the engine grants Exclusive leases only
	// (a server lock with no shared mode, such as MySQL's GET_LOCK).
	// CheckRequest refuses a Shared request from such an engine with
	// ErrInvalidRequest, before any I/O.
	ExclusiveOnly bool
}

// Engine grants leases on one kind of server. Its methods are safe for
// concurrent use.
type Engine interface {
	// Name is a short lower-case name such as "redis" or "memory".
	Name() string
	// Limits reports the bounds Validate enforces.
	Limits() Limits
	// Validate checks a request without any I/O. It returns an error that
	// wraps ErrInvalidKey, ErrInvalidTTL or ErrInvalidRequest, or nil.
	// Validate works on a closed engine too.
	Validate(req Request) error
	// Acquire grants a lease, validating req first.
	//
	// Without req.Wait it makes one attempt and returns ErrNotAcquired when
	// the key is held elsewhere. With req.Wait it blocks until the lease is
	// granted or ctx ends; then it returns errors.Join(ErrNotAcquired,
	// ctx.Err()) and leaves nothing behind on the server: what the wait
	// put there (a queue entry, a node, a waiting-writer mark) is removed
	// before Acquire returns when the server answers within UndoWait, and
	// otherwise in the background, and it is gone when Close returns. A
	// closed engine returns ErrClosed. Server failures are returned as
	// *OpError, wrapping ErrUnavailable or ErrAccessDenied by the rule
	// documented at ErrUnavailable.
	Acquire(ctx context.Context, req Request) (Lease, error)
	// Ping checks that the server answers. A closed engine returns
	// ErrClosed; a server that is not serving, an *OpError wrapping
	// ErrUnavailable; never so when ctx ended first.
	Ping(ctx context.Context) error
	// Close releases every lease the engine still holds (best effort, with a
	// bounded wait), closes their Done channels with ErrClosed, waits for
	// the clean-ups of ended waits, and stops the engine's goroutines.
	// Resources passed in by the caller, such as a client connection, stay
	// open. Close is idempotent.
	Close() error
}

// Lease is one granted hold on a key. Its methods are safe for concurrent
// use.
type Lease interface {
	// Key is the key the lease holds.
	Key() string
	// Mode is the mode the lease was granted in.
	Mode() Mode
	// Token is the fencing token: it strictly increases over successive
	// grants of the same key on the same engine.
	Token() uint64
	// Done is closed when the lease ends, by release or by loss.
	Done() <-chan struct{}
	// Err is nil while the lease is held. After Done closes it wraps
	// ErrReleased, ErrLeaseLost or ErrClosed.
	Err() error
	// Release gives the key up on the server with a compare-and-delete on
	// this lease's ownership. It returns ErrNotHeld, changing nothing, if the
	// lease no longer holds the key; the lease then ends with ErrLeaseLost if
	// it had not ended already. Release is safe to call after loss.
	Release(ctx context.Context) error
}

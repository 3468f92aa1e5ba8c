package engine

import (
	"context"
	"errors"
	"fmt"
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
	// ErrReleasedByOperator: the lease ended because an operator freed its
	// key on the server (Releaser.ForceRelease). It wraps ErrLeaseLost, so
	// code that handles a lost lease handles it too; errors.Is tells the
	// two apart.
	ErrReleasedByOperator = fmt.Errorf("%w: released by an operator", ErrLeaseLost)
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
	// ErrUnavailable says that the engine is not serving now and another
	// engine might: the failover manager's health checks and fleet
	// decisions count only failures that wrap it. Engines return it inside
	// an *OpError, and follow one rule.
	//
	// An engine returns ErrUnavailable when the server could not be
	// reached, the connection broke, or the server answered that it cannot
	// serve now: it is starting, shutting down, without a leader or quorum,
	// out of connections, or overloaded (Redis LOADING, MASTERDOWN,
	// TRYAGAIN, CLUSTERDOWN, BUSY, READONLY, max clients; Consul 5xx and 429;
	// MySQL 1040, 1053, lost or bad connections; ZooKeeper connection and
	// session failures). It also returns it when a deadline the engine set
	// itself for one call expired while the caller's context was still
	// live.
	//
	// An engine never returns ErrUnavailable when the caller's context has
	// ended: a failure seen after ctx is done is the caller's, so Acquire
	// returns ErrNotAcquired joined with ctx.Err() and every other call an
	// error wrapping ctx.Err(). Nor for an access-control refusal (those wrap
	// ErrAccessDenied), an invalid request (ErrInvalidKey, ErrInvalidTTL,
	// ErrInvalidRequest), a closed engine (ErrClosed), or an answer of a
	// healthy server that fails the operation for a reason of its own, such
	// as a missing table or a script error.
	ErrUnavailable = errors.New("cerberus: engine unavailable")
	// ErrAccessDenied: the server refused the operation by its access
	// control: a wrong or missing password or token, a missing permission,
	// an expired or locked account. Engines return it inside an *OpError.
	// It never also wraps ErrUnavailable: a wrong password is a
	// configuration error, not an outage, and another engine would not fix
	// it.
	ErrAccessDenied = errors.New("cerberus: access denied")
)

// Classify returns the cause an engine puts in an *OpError for err, a
// failure of a call made for a caller whose context is ctx, following the
// rule documented at ErrUnavailable. If ctx has ended, err is the caller's:
// the result wraps err and ctx.Err() and neither sentinel. Otherwise it
// wraps ErrAccessDenied when denied(err) reports true, ErrUnavailable when
// down(err) does or err is a context.DeadlineExceeded (a deadline the
// engine set itself), and is err itself when neither applies or err
// already wraps one of the two (an ended ctx drops such a mark and keeps
// only the text). A call made for no caller passes context.Background().
func Classify(ctx context.Context, err error, denied, down func(error) bool) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		switch {
		case errors.Is(err, ErrAccessDenied) || errors.Is(err, ErrUnavailable):
			return fmt.Errorf("%w: %v", ctxErr, err) // keep the text, not the mark
		case errors.Is(err, ctxErr):
			return err
		}
		return fmt.Errorf("%w: %w", ctxErr, err)
	}
	switch {
	case errors.Is(err, ErrAccessDenied) || errors.Is(err, ErrUnavailable):
		return err
	case denied(err):
		return fmt.Errorf("%w: %w", ErrAccessDenied, err)
	case down(err) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// OpError reports a failed operation on an engine's server. It never holds
// credentials: engines put addresses and keys in it, not DSNs or tokens.
type OpError struct {
	Engine string // engine name, such as "redis"
	Op     string // "acquire", "release", "renew", "ping", ...
	Key    string // the lock key, if any
	Err    error  // the cause; may wrap ErrUnavailable or ErrAccessDenied
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

package cerberus

import (
	"errors"
	"fmt"

	"github.com/cerberus-go/cerberus/engine"
)

// Errors returned by the Client and its leases. They are the engine
// package's sentinels, so errors.Is works whichever package a caller names.
var (
	// ErrNotAcquired: TryLock found the key held, or a wait ended with its
	// context (joined with ctx.Err()).
	ErrNotAcquired = engine.ErrNotAcquired
	// ErrNotHeld: Unlock of a lease that had already ended or been unlocked.
	ErrNotHeld = engine.ErrNotHeld
	// ErrLeaseLost: the lease ended without Unlock (expiry, failed renewal,
	// lost session or connection).
	ErrLeaseLost = engine.ErrLeaseLost
	// ErrReleased: the lease ended by Unlock.
	ErrReleased = engine.ErrReleased
	// ErrReleasedByOperator: the lease ended because an operator freed its
	// key on the server (cerberusctl release, the failover Handler's
	// release, engine.Releaser). It wraps ErrLeaseLost. The holder is told
	// no later than its next renewal; its fenced writes are refused, since
	// the next holder's token is higher.
	ErrReleasedByOperator = engine.ErrReleasedByOperator
	// ErrEngineSwitched: the lease ended because the client moved to another
	// engine.
	ErrEngineSwitched = engine.ErrEngineSwitched
	// ErrClosed: the client or its engine was closed.
	ErrClosed = engine.ErrClosed
	// ErrInvalidKey: the key is empty, too long or not representable.
	ErrInvalidKey = engine.ErrInvalidKey
	// ErrInvalidTTL: a TTL outside the engine's limits, or a hold limit
	// outside [engine.MinTTL, engine.MaxTTL].
	ErrInvalidTTL = engine.ErrInvalidTTL
	// ErrInvalidRequest: any other malformed request or setting, such as an
	// unknown mode, or a failover.Manager given no engine or a duplicate name.
	ErrInvalidRequest = engine.ErrInvalidRequest
	// ErrUnavailable: the engine is not serving now (unreachable, broken
	// connection, shutting down, overloaded); another engine might. It is
	// never the result of the caller's context ending, nor of a refusal by
	// access control. See engine.ErrUnavailable for the full rule.
	ErrUnavailable = engine.ErrUnavailable
	// ErrAccessDenied: the server refused by its access control (wrong
	// password or token, missing permission). It never also wraps
	// ErrUnavailable.
	ErrAccessDenied = engine.ErrAccessDenied
	// ErrHoldLimit: the lease ended because it reached its hold limit
	// (WithHoldLimit). It wraps ErrLeaseLost, so code that checks for a
	// loss sees this one too. The holder is told before the key is
	// released on the server.
	ErrHoldLimit = fmt.Errorf("%w: hold limit reached", engine.ErrLeaseLost)
	// ErrUpgrade: an owner holding a key shared asked for it exclusively.
	ErrUpgrade = errors.New("cerberus: cannot upgrade a shared hold to exclusive")
)

// OpError reports a failed operation on an engine's server: the engine, the
// operation, the key and the cause, which errors.Is and errors.As reach
// (ErrUnavailable, ErrAccessDenied, and the server's own error). It is
// engine.OpError, so errors.As with either name matches:
//
//	var oe *cerberus.OpError
//	if errors.As(err, &oe) { log.Printf("engine %s failed at %s", oe.Engine, oe.Op) }
type OpError = engine.OpError

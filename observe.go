package cerberus

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// Observer is told about every acquisition and every loss, for metrics and
// logs. Its methods are called synchronously on the acquiring or losing
// goroutine and must not block. See LogObserver, and package metrics for
// Prometheus.
type Observer interface {
	// Acquired follows every call that reached the engine: Lock, TryLock,
	// RLock, TryRLock and each key of LockAll. Err is nil on a grant.
	// Re-entries by an owner do not reach the engine and are not reported.
	Acquired(AcquireEvent)
	// Lost follows every lease that ended without its Unlock: expiry,
	// session or connection loss, an engine switch, Close.
	Lost(LostEvent)
}

// AcquireEvent describes one acquisition attempt.
type AcquireEvent struct {
	Engine   string        // the engine that answered (the active one, under a failover.Manager)
	Key      string        //
	Shared   bool          // RLock or TryRLock
	Wait     bool          // Lock or RLock, rather than a single attempt
	Duration time.Duration // from the call to its answer, waiting included
	Token    uint64        // on a grant
	Err      error         // nil on a grant
}

// LostEvent describes one lease that ended without Unlock.
type LostEvent struct {
	Engine string
	Key    string
	Err    error // ErrLeaseLost (ErrHoldLimit among them), ErrEngineSwitched or ErrClosed, wrapped
}

// EndObserver is an Observer that also hears when each granted lease
// ends, for whatever reason: Unlock, expiry or session loss, the hold
// limit, a force release, an engine switch, Close. It is optional, so that
// Observers written before it keep compiling: the Client calls Ended on an
// Observer that implements it. Ended is called exactly once for each grant
// reported to Acquired (a lease of LockAll counts once per key; nested
// leases of one owner share their outer lease's grant and end with its
// last Unlock), after Acquired and, for a loss, after Lost, and before the
// lease's Done closes (unless the lease was lost before Acquired was
// reported: then right after it). Grants minus ends is the number of
// leases held now (package metrics' leases_held gauge). Like the others,
// it is called synchronously and must not block.
type EndObserver interface {
	Observer
	// Ended follows the end of a granted lease.
	Ended(EndEvent)
}

// EndEvent describes one granted lease that ended.
type EndEvent struct {
	Engine string        // the engine that granted it, as in its AcquireEvent
	Key    string        //
	Shared bool          // granted by RLock or TryRLock
	Held   time.Duration // from the grant to the end
	Err    error         // ErrReleased (Unlock); ErrLeaseLost if Unlock's release failed; else as in LostEvent
}

// WithObserver reports acquisitions and losses to o, and the end of each
// lease if o is an EndObserver. Given to New it
// covers every call; given to a call, that call. The default is none.
func WithObserver(o Observer) Option { return func(s *settings) { s.observer = o } }

// engineOf names the engine that granted l (engine.Namer): under a
// failover.Manager, the engine that was active at the grant. With no lease (a
// refusal), it names the engine that serves now (engine.Switcher), the
// manager's active engine.
func engineOf(e engine.Engine, l engine.Lease) string {
	if n, ok := l.(engine.Namer); ok {
		return n.EngineName()
	}
	if a, ok := e.(engine.Switcher); ok {
		return a.Active()
	}
	return e.Name()
}

// LogObserver returns an Observer that logs to l: refused and failed
// acquisitions and every loss at Warn (a context that ended is Info),
// grants at Debug. Keys are logged; nothing else a caller passes in is.
func LogObserver(l *slog.Logger) Observer { return logObserver{l} }

type logObserver struct{ l *slog.Logger }

func (o logObserver) Acquired(e AcquireEvent) {
	attrs := []any{slog.String("engine", e.Engine), slog.String("key", e.Key),
		slog.Bool("shared", e.Shared), slog.Duration("took", e.Duration)}
	switch {
	case e.Err == nil:
		o.l.Debug("cerberus: lock granted", append(attrs, slog.Uint64("token", e.Token))...)
	case errorsIsCtx(e.Err):
		o.l.Info("cerberus: lock wait ended with its context",
			append(attrs, slog.String("err", e.Err.Error()))...)
	default:
		o.l.Warn("cerberus: lock not acquired", append(attrs, slog.String("err", e.Err.Error()))...)
	}
}

func (o logObserver) Lost(e LostEvent) {
	o.l.Warn("cerberus: lease lost", slog.String("engine", e.Engine), slog.String("key", e.Key),
		slog.String("err", e.Err.Error()))
}

func errorsIsCtx(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

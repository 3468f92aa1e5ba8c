package enginetest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// checkUnreachable: an engine whose server cannot be reached says so. Ping
// and Acquire (TryLock, waiting, shared) fail before the caller's context
// ends with an *engine.OpError wrapping ErrUnavailable, and neither
// ErrAccessDenied nor ErrNotAcquired; a caller's cancel that comes first
// is the caller's (ErrNotAcquired joined with context.Canceled), not
// unavailability. Without Options.Unreachable there is nothing to check.
func checkUnreachable(h *harness) {
	e := h.mustFailAs("Unreachable", h.opts.Unreachable, engine.ErrUnavailable, engine.ErrAccessDenied)
	if e == nil {
		return
	}
	if err := e.Ping(h.ctx()); !errors.Is(err, engine.ErrUnavailable) ||
		errors.Is(err, engine.ErrAccessDenied) {
		h.t.Errorf("Ping on the Unreachable engine: want ErrUnavailable (and not ErrAccessDenied), got "+
			"%v", err)
	}
	// The caller cancels while the engine may still be trying to reach
	// its server: whichever comes first decides the error.
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(200*time.Millisecond, cancel)
	defer stop.Stop()
	l, err := e.Acquire(ctx, hold(h.key()))
	cancel()
	if l != nil {
		h.t.Errorf("Acquire on the unreachable engine returned a lease")
		_ = l.Release(context.Background())
	}
	switch {
	case errors.Is(err, context.Canceled):
		if !errors.Is(err, engine.ErrNotAcquired) || errors.Is(err, engine.ErrUnavailable) {
			h.t.Errorf("Acquire cancelled by its caller on the unreachable engine: want ErrNotAcquired "+
				"joined with context.Canceled, not ErrUnavailable, got %v", err)
		}
	case !errors.Is(err, engine.ErrUnavailable):
		h.t.Errorf("Acquire on the unreachable engine, before its caller cancelled: want "+
			"ErrUnavailable, got %v", err)
	}
}

// checkAccessDenied: an engine the server refuses by its access control
// fails Acquire (TryLock, waiting, shared) before the caller's context ends
// with an *engine.OpError wrapping ErrAccessDenied, and neither
// ErrUnavailable nor ErrNotAcquired; its Ping, which may need no
// permission, may succeed but never reports ErrUnavailable. Without
// Options.AccessDenied there is nothing to check.
func checkAccessDenied(h *harness) {
	e := h.mustFailAs("AccessDenied", h.opts.AccessDenied, engine.ErrAccessDenied,
		engine.ErrUnavailable)
	if e == nil {
		return
	}
	if err := e.Ping(h.ctx()); errors.Is(err, engine.ErrUnavailable) || err != nil &&
		!errors.Is(err, engine.ErrAccessDenied) {
		h.t.Errorf("Ping on the AccessDenied engine: want nil or ErrAccessDenied (and not "+
			"ErrUnavailable), got %v", err)
	}
}

// mustFailAs makes an engine with f, the factory of Options field hook,
// and runs Acquire on it: a TryLock, a waiting exclusive and a waiting
// shared request, each of which must fail before its context ends with an
// *engine.OpError wrapping want, and wrapping neither unwanted nor
// ErrNotAcquired. It returns the engine, or nil without f.
func (h *harness) mustFailAs(hook string, f Factory, want, unwanted error) engine.Engine {
	h.t.Helper()
	if f == nil {
		h.t.Logf("no Options.%s: not checked", hook)
		return nil
	}
	e := h.make(f, hook+" engine")
	key := h.key()
	reqs := []engine.Request{try(key), hold(key), shared(hold(key))}
	if e.Limits().ExclusiveOnly {
		reqs = reqs[:2] // a shared request is refused before any I/O (SharedMode checks it)
	}
	for _, req := range reqs {
		desc := fmt.Sprintf("%v Acquire (wait=%v) on the %s engine", req.Mode, req.Wait, hook)
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		l, err := e.Acquire(ctx, req)
		ended := ctx.Err() != nil
		cancel()
		var op *engine.OpError
		switch {
		case l != nil:
			h.t.Errorf("%s returned a lease", desc)
			_ = l.Release(context.Background())
		case ended:
			h.t.Errorf("%s failed only when its context ended: %v", desc, err)
		case !errors.Is(err, want) || !errors.As(err, &op):
			h.t.Errorf("%s: want an *engine.OpError wrapping %v, got %v", desc, want, err)
		case errors.Is(err, unwanted) || errors.Is(err, engine.ErrNotAcquired):
			h.t.Errorf("%s: %v must not also wrap %v or ErrNotAcquired: %v", desc, want, unwanted, err)
		}
	}
	return e
}

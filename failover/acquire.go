package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// errSwitched cancels a wait on an engine that is no longer active.
var errSwitched = errors.New("cerberus: active engine changed")

// Acquire grants a lease on the active engine; see engine.Engine. A wait
// that outlives a switch carries on on the new engine.
func (m *Manager) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := m.Validate(req); err != nil {
		return nil, err
	}
	for {
		l, err := m.attempt(ctx, req)
		if errors.Is(err, errSwitched) && req.Wait && ctx.Err() == nil {
			continue
		}
		if errors.Is(err, errSwitched) {
			return nil, fmt.Errorf("%w: the active engine changed during the attempt", engine.ErrNotAcquired)
		}
		return l, err
	}
}

func (m *Manager) attempt(ctx context.Context, req engine.Request) (engine.Lease, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, engine.ErrClosed
	}
	idx, epoch, fence := m.active, m.epoch, m.fenceUntil
	actx, cancel := context.WithCancelCause(ctx)
	m.waiters[&cancel] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waiters, &cancel)
		m.mu.Unlock()
		cancel(nil)
	}()

	if err := m.waitFence(ctx, actx, req, fence, idx); err != nil {
		return nil, err
	}
	fl := &lease{m: m, epoch: epoch, engine: m.engines[idx].Name,
		sig: kit.NewSignal(req.OnLost)}
	inner := req
	inner.OnLost = fl.innerLost
	l, err := m.engines[idx].Engine.Acquire(actx, inner)
	if err != nil {
		if cause := context.Cause(actx); ctx.Err() == nil &&
			(errors.Is(cause, errSwitched) || errors.Is(cause, engine.ErrClosed)) {
			return nil, cause // a switch, or Close, ended the wait
		}
		m.noteFailure(actx, err)
		return nil, err
	}
	fl.inner = l
	if l.Token() >= 1<<tokenBits {
		m.releaseLater(l)
		return nil, &engine.OpError{Engine: m.engines[idx].Name, Op: "acquire", Key: req.Key,
			Err: fmt.Errorf("token %d does not fit in %d bits beside the epoch", l.Token(), tokenBits)}
	}
	m.mu.Lock()
	if m.epoch != epoch || m.closed {
		// Switched (or closed) while the grant was on its way.
		m.mu.Unlock()
		m.releaseLater(l)
		return nil, errSwitched
	}
	m.leases[fl] = struct{}{}
	m.maxTTL = max(m.maxTTL, req.TTL)
	m.mu.Unlock()
	return fl, nil
}

// waitFence waits until fence, the end of the fence after a switch to
// engine idx, if req waits; actx is attempt's context, which a switch or
// Close cancels.
func (m *Manager) waitFence(ctx, actx context.Context, req engine.Request, fence time.Time,
	idx int) error {
	wait := time.Until(fence)
	if wait <= 0 {
		return nil
	}
	if !req.Wait {
		return fmt.Errorf("%w: fenced for %v after the switch to %s", engine.ErrNotAcquired,
			wait.Round(time.Millisecond), m.engines[idx].Name)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-actx.Done():
	}
	switch cause := context.Cause(actx); {
	case errors.Is(cause, errSwitched):
		return errSwitched
	case errors.Is(cause, engine.ErrClosed) && ctx.Err() == nil:
		return engine.ErrClosed
	}
	return errors.Join(engine.ErrNotAcquired, ctx.Err())
}

// releaseLater releases l in the background, bounded, where its engine
// still answers.
func (m *Manager) releaseLater(l engine.Lease) {
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Release(ctx)
	}()
}

// lease is a lease of the active engine, stamped with its epoch.
type lease struct {
	m      *Manager
	epoch  uint64
	engine string
	inner  engine.Lease
	sig    *kit.Signal
}

func (l *lease) Key() string           { return l.inner.Key() }
func (l *lease) Mode() engine.Mode     { return l.inner.Mode() }
func (l *lease) Token() uint64         { return l.epoch<<tokenBits | l.inner.Token() }
func (l *lease) Done() <-chan struct{} { return l.sig.Done() }

// EngineName names the engine that granted the lease, for observers
// (engine.Namer).
func (l *lease) EngineName() string { return l.engine }
func (l *lease) Err() error         { return l.sig.Err() }

// Nodes passes on the inner lease's node count (see Lease.Nodes); a lease
// of an engine without nodes reports 0 of 0.
func (l *lease) Nodes() (held, total int) {
	if n, ok := l.inner.(engine.NodeCounter); ok {
		return n.Nodes()
	}
	return 0, 0
}

// innerLost passes the engine's loss on; a loss for want of the server
// (a failed renewal) asks for a quick probe.
func (l *lease) innerLost(err error) {
	if l.m.forget(l) {
		l.m.noteFailure(nil, err)
	}
	l.sig.Close(err)
}

// Release releases on the lease's engine. After a switch the lease has
// already ended (and its release is under way in the background): Release
// returns ErrNotHeld wrapping ErrEngineSwitched.
func (l *lease) Release(ctx context.Context) error {
	if !l.m.forget(l) {
		if err := l.sig.Err(); err != nil {
			return fmt.Errorf("%w: %q: %w", engine.ErrNotHeld, l.Key(), err)
		}
	}
	err := l.inner.Release(ctx)
	if err != nil {
		l.m.noteFailure(ctx, err)
		cause := l.inner.Err()
		if cause == nil {
			cause = err
		}
		l.sig.Close(cause)
		return err
	}
	l.sig.Close(engine.ErrReleased)
	return nil
}

// forget stops tracking l and reports whether it was tracked.
func (m *Manager) forget(l *lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.leases[l]
	delete(m.leases, l)
	return ok
}

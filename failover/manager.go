package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// NamedEngine is one engine of a Manager, in priority order.
type NamedEngine struct {
	Name   string
	Engine engine.Engine
}

// tokenBits is how many low bits of a token the engine's own token may
// use; the epoch sits above them.
const tokenBits = 48

// ErrUnknownEngine: SetActive named an engine the Manager does not have.
var ErrUnknownEngine = errors.New("cerberus: unknown engine")

// Manager is an engine.Engine over several engines in priority order: it
// dispatches to the active one, pings all of them, and moves to another on
// an operator's SetActive or, with Auto, when the active engine is down.
// Give it to cerberus.New like any engine; the Client's reentrancy and
// LockAll work unchanged. The package documentation says what a switch
// does to leases, how fast an outage is detected, and how tokens stay
// ordered across a switch.
type Manager struct {
	engines []NamedEngine
	opts    Options

	mu         sync.Mutex
	active     int
	epoch      uint64
	health     []EngineStatus
	leases     map[*lease]struct{}
	waiters    map[*context.CancelCauseFunc]struct{}
	maxTTL     time.Duration // longest TTL granted in this epoch
	fenceUntil time.Time
	override   string
	fleet      FleetStatus
	suspect    chan struct{} // real traffic saw the active engine unavailable
	pinging    []atomic.Bool // a ping of engines[i] is under way
	closed     bool
	closing    chan struct{}
	loopDone   chan struct{}
	bg         sync.WaitGroup // background releases on old engines
}

// A Manager is an engine.Engine, and an engine.Switcher: observers name
// its active engine. Its leases are engine.Namers: they name the engine that
// granted them.
var (
	_ engine.Engine   = (*Manager)(nil)
	_ engine.Switcher = (*Manager)(nil)
	_ engine.Namer    = (*lease)(nil)
)

// New returns a Manager over engines, which it owns: Close closes
// them. It does no I/O; the health loop starts now.
func New(engines []NamedEngine, opts Options) (*Manager, error) {
	if len(engines) == 0 {
		return nil, fmt.Errorf("%w: failover needs at least one engine", engine.ErrInvalidRequest)
	}
	seen := map[string]bool{}
	for i, ne := range engines {
		switch {
		case ne.Name == "":
			return nil, fmt.Errorf("%w: engines[%d]: empty name", engine.ErrInvalidRequest, i)
		case seen[ne.Name]:
			return nil, fmt.Errorf("%w: engines[%d]: duplicate name %q", engine.ErrInvalidRequest, i,
				ne.Name)
		case ne.Engine == nil:
			return nil, fmt.Errorf("%w: engines[%d] (%s): nil engine", engine.ErrInvalidRequest, i, ne.Name)
		}
		seen[ne.Name] = true
	}
	opts = opts.withDefaults()
	if opts.Interval < 0 || opts.Threshold < 0 {
		return nil, fmt.Errorf("%w: failover: interval %v and threshold %d must be positive",
			engine.ErrInvalidRequest, opts.Interval, opts.Threshold)
	}
	if opts.Epoch >= 1<<(64-tokenBits) {
		return nil, fmt.Errorf("%w: failover: epoch %d does not fit in %d bits", engine.ErrInvalidRequest,
			opts.Epoch, 64-tokenBits)
	}
	m := &Manager{
		engines: engines, opts: opts, epoch: opts.Epoch,
		health:   make([]EngineStatus, len(engines)),
		leases:   make(map[*lease]struct{}),
		waiters:  make(map[*context.CancelCauseFunc]struct{}),
		override: opts.Active,
		suspect:  make(chan struct{}, 1),
		pinging:  make([]atomic.Bool, len(engines)),
		closing:  make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	for i, ne := range engines {
		m.health[i] = EngineStatus{Name: ne.Name, Healthy: true}
		if ne.Name == opts.Active {
			m.active = i
		}
	}
	go m.healthLoop()
	return m, nil
}

// Name returns "failover".
func (m *Manager) Name() string { return "failover" }

// Limits are the narrowest of every engine's, so that a request valid now
// stays valid after a switch.
func (m *Manager) Limits() engine.Limits {
	lim := m.engines[0].Engine.Limits()
	for _, ne := range m.engines[1:] {
		l := ne.Engine.Limits()
		lim.MaxKeyLen = min(lim.MaxKeyLen, l.MaxKeyLen)
		lim.MinTTL = max(lim.MinTTL, l.MinTTL)
		lim.MaxTTL = min(lim.MaxTTL, l.MaxTTL)
		lim.Floor = max(lim.Floor, l.Floor)
		lim.Counted = lim.Counted && l.Counted
		lim.ExclusiveOnly = lim.ExclusiveOnly || l.ExclusiveOnly
	}
	return lim
}

// Validate checks req against every engine, without I/O.
func (m *Manager) Validate(req engine.Request) error {
	for _, ne := range m.engines {
		if err := ne.Engine.Validate(req); err != nil {
			return err
		}
	}
	return nil
}

// Ping pings the active engine.
func (m *Manager) Ping(ctx context.Context) error {
	e, _, err := m.current()
	if err != nil {
		return err
	}
	return e.Ping(ctx)
}

// Active returns the name of the active engine (engine.Switcher).
func (m *Manager) Active() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.engines[m.active].Name
}

// Epoch returns the current epoch: the top 16 bits of every token granted
// now.
func (m *Manager) Epoch() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch
}

// Status returns every engine's health, in priority order.
func (m *Manager) Status() []EngineStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]EngineStatus(nil), m.health...)
	out[m.active].Active = true
	return out
}

func (m *Manager) current() (engine.Engine, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, 0, engine.ErrClosed
	}
	return m.engines[m.active].Engine, m.active, nil
}

// Close stops the health loop, waits for background releases, and closes
// every engine, which ends their leases with ErrClosed.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.closing)
	for cancel := range m.waiters {
		(*cancel)(engine.ErrClosed)
	}
	m.mu.Unlock()
	<-m.loopDone
	m.bg.Wait()
	var errs []error
	for _, ne := range m.engines {
		if err := ne.Engine.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ne.Name, err))
		}
	}
	return errors.Join(errs...)
}

package cerberus

import (
	"context"
	"fmt"

	"github.com/cerberus-go/cerberus/engine"
)

// semaphorePrefix starts the key of every semaphore, so that a semaphore
// and a lock of the same name are different keys.
const semaphorePrefix = "semaphore/"

// Semaphore is a named counting semaphore: at most N leases (permits) hold
// it at once, across every process whose Client uses the same engine. Each
// permit is a Lease like a lock's: its own fencing token (increasing per
// semaphore), Done and Err, a watchdog or a fixed TTL, an optional hold
// limit (WithHoldLimit, ending it with ErrHoldLimit), and Unlock to give
// it back. Waiters are served in arrival order where the engine queues
// them. A crashed holder's permit frees itself as its lock would (the
// lease period, or the engine's Limits().Floor).
//
// The engine must count natively (engine.Limits.Counted): memory, Redis
// (not Redlock), ZooKeeper, Consul, etcd and the MySQL and PostgreSQL lease
// strategies do; on any other engine Acquire returns ErrInvalidRequest
// before any I/O. Every process must give the same name the same N.
type Semaphore struct {
	c    *Client
	name string
	n    int
}

// Semaphore returns the semaphore name of n permits. It does no I/O; the
// name and n are checked (1 <= n <= engine.MaxLimit) by every call.
func (c *Client) Semaphore(name string, n int) *Semaphore {
	return &Semaphore{c: c, name: name, n: n}
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Size returns how many permits the semaphore has.
func (s *Semaphore) Size() int { return s.n }

// Acquire takes a permit, waiting while all are held or ctx ends. Its
// errors are Lock's; a semaphore name, size or option the engine cannot
// take is refused before any I/O with ErrInvalidKey, ErrInvalidTTL or
// ErrInvalidRequest.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lease, error) {
	return s.acquire(ctx, true, opts)
}

// TryAcquire makes one attempt to take a permit, and returns
// ErrNotAcquired at once if all are held.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lease, error) {
	return s.acquire(ctx, false, opts)
}

func (s *Semaphore) acquire(ctx context.Context, wait bool, opts []Option) (*Lease, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	set := s.c.defaults.with(opts)
	req := s.c.request(semaphorePrefix+s.name, engine.Shared, wait, set)
	req.Limit = s.n
	return s.c.acquireOnce(ctx, req, set)
}

// check validates the name and size; the engine validates the rest.
func (s *Semaphore) check() error {
	if s.name == "" {
		return fmt.Errorf("%w: empty semaphore name", ErrInvalidKey)
	}
	if s.n < 1 || s.n > engine.MaxLimit {
		return fmt.Errorf("%w: semaphore %q has %d permits, want 1 to %d", ErrInvalidRequest, s.name, s.n,
			engine.MaxLimit)
	}
	return nil
}

// InUse returns how many permits are held now. It needs an engine that
// can list a key's holders (engine.Inspector), and counts them; Inspect
// them through engine.Inspector.Holders for who holds them.
func (s *Semaphore) InUse(ctx context.Context) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	hs, err := holders(ctx, s.c, semaphorePrefix+s.name)
	if err != nil {
		return 0, err
	}
	return len(hs), nil
}

// holders lists key's holders on c's engine, or says that the engine
// cannot.
func holders(ctx context.Context, c *Client, key string) ([]engine.Holder, error) {
	in := engine.InspectorOf(c.eng)
	if in == nil {
		return nil, fmt.Errorf("%w: engine %s cannot list a key's holders", ErrInvalidRequest, c.eng.Name())
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	return in.Holders(ctx, key)
}

package cerberus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cerberus-go/cerberus/engine"
)

// Client hands out leases from an engine. It is safe for concurrent use.
type Client struct {
	eng      engine.Engine
	defaults settings

	mu     sync.Mutex
	holds  map[holdKey]*hold // holds of callers with an owner, for reentrancy
	closed bool
}

// holdKey identifies one owner's hold on one key.
type holdKey struct {
	owner uint64
	key   string
}

// New returns a Client over e. The options set the defaults for every call;
// New checks them against e's limits without any I/O. The Client owns e:
// Close closes it.
func New(e engine.Engine, opts ...Option) (*Client, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil engine", engine.ErrInvalidRequest)
	}
	c := &Client{eng: e, defaults: defaultSettings().with(opts), holds: make(map[holdKey]*hold)}
	if err := c.defaults.check(); err != nil {
		return nil, fmt.Errorf("cerberus: default lease options: %w", err)
	}
	probe := engine.Request{Key: "cerberus:probe", TTL: c.defaults.ttl, Renew: c.defaults.renew}
	if err := e.Validate(probe); err != nil {
		return nil, fmt.Errorf("cerberus: default lease options: %w", err)
	}
	return c, nil
}

// Engine returns the engine the client uses.
func (c *Client) Engine() engine.Engine { return c.eng }

// Lock takes key exclusively, waiting until it is free or ctx ends. When ctx
// ends first it returns ErrNotAcquired joined with ctx.Err(), and nothing is
// left held. Invalid keys and options return ErrInvalidKey or ErrInvalidTTL
// before any I/O; a closed client returns ErrClosed. The lease's Err may
// later be ErrHoldLimit (see WithHoldLimit).
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return c.acquire(ctx, key, engine.Exclusive, true, opts)
}

// TryLock makes one attempt to take key exclusively and returns
// ErrNotAcquired at once if it is held elsewhere.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return c.acquire(ctx, key, engine.Exclusive, false, opts)
}

// RLock takes key shared, waiting while a writer holds it or waits for it.
// Its errors are Lock's; an owner that holds key shared and asks for it
// exclusively gets ErrUpgrade. An engine with exclusive leases only
// (engine.Limits.ExclusiveOnly: MySQL's session strategy) refuses it with
// ErrInvalidRequest before any I/O.
func (c *Client) RLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return c.acquire(ctx, key, engine.Shared, true, opts)
}

// TryRLock makes one attempt to take key shared.
func (c *Client) TryRLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return c.acquire(ctx, key, engine.Shared, false, opts)
}

// LockAll takes every key exclusively, or none. Keys are taken in sorted
// order, the same for every client, so two LockAll calls over overlapping
// keys cannot deadlock; duplicates are taken once. Every key is validated
// before the first is taken. If any Lock fails, the keys already taken are
// released (with a context that is not cancelled) and the error is returned.
// The returned lease covers every key: see Lease.Parts.
func (c *Client) LockAll(ctx context.Context, keys []string, opts ...Option) (*Lease, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: LockAll needs at least one key", engine.ErrInvalidKey)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	s := c.defaults.with(opts)
	if err := s.check(); err != nil {
		return nil, err
	}
	for _, key := range sorted {
		if err := c.eng.Validate(c.request(key, engine.Exclusive, true, s)); err != nil {
			return nil, err
		}
	}
	parts := make([]*Lease, 0, len(sorted))
	for _, key := range sorted {
		l, err := c.acquire(ctx, key, engine.Exclusive, true, opts)
		if err != nil {
			cleanup := context.WithoutCancel(ctx)
			for i := len(parts) - 1; i >= 0; i-- {
				if uerr := parts[i].Unlock(cleanup); uerr != nil {
					err = errors.Join(err, uerr)
				}
			}
			return nil, err
		}
		parts = append(parts, l)
	}
	return newMulti(parts), nil
}

func (c *Client) request(key string, mode engine.Mode, wait bool, s settings) engine.Request {
	return engine.Request{Key: key, Mode: mode, TTL: s.ttl, Renew: s.renew, Wait: wait}
}

// acquireOnce grants req as a lease of its own, without reentrancy: a
// semaphore permit or an election campaign, where each call is a hold of
// its own. req is validated first.
func (c *Client) acquireOnce(ctx context.Context, req engine.Request, s settings) (*Lease, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := c.eng.Validate(req); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, engine.ErrClosed
	}
	h := c.newHold(req.Key, req.Mode, 0, s)
	if err := h.acquire(ctx, req); err != nil {
		return nil, err
	}
	return &Lease{h: h}, nil
}

// acquire is every Lock variant: validation, reentrancy, then the engine.
func (c *Client) acquire(ctx context.Context, key string, mode engine.Mode, wait bool,
	opts []Option) (*Lease, error) {
	s := c.defaults.with(opts)
	req := c.request(key, mode, wait, s)
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := c.eng.Validate(req); err != nil {
		return nil, err
	}
	owner := ownerOf(ctx)
	if owner == 0 {
		if c.isClosed() {
			return nil, engine.ErrClosed
		}
		h := c.newHold(key, mode, 0, s)
		if err := h.acquire(ctx, req); err != nil {
			return nil, err
		}
		return &Lease{h: h}, nil
	}
	k := holdKey{owner, key}
	if l, err := c.reenter(ctx, k, mode); l != nil || err != nil {
		return l, err
	}
	// c.mu is locked, and the owner has no live hold of the key.
	h := c.newHold(key, mode, owner, s)
	c.holds[k] = h
	c.mu.Unlock()
	err := h.acquire(ctx, req)
	c.mu.Lock()
	if err != nil && c.holds[k] == h {
		delete(c.holds, k)
	}
	close(h.ready)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &Lease{h: h}, nil
}

// reenter counts up the owner's hold of k (reentrancy, no round trip) and
// returns a lease of it, waiting while another goroutine of the owner is
// acquiring the key. It returns neither lease nor error when the owner has
// no live hold of k, and then leaves c.mu locked for the caller to insert
// one.
func (c *Client) reenter(ctx context.Context, k holdKey, mode engine.Mode) (*Lease, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, engine.ErrClosed
		}
		h := c.holds[k]
		if h == nil {
			return nil, nil // c.mu stays locked for the insert
		}
		select {
		case <-h.ready:
		default:
			// Another goroutine of this owner is acquiring the key: wait
			// for its outcome instead of queueing behind ourselves.
			c.mu.Unlock()
			select {
			case <-h.ready:
				continue
			case <-ctx.Done():
				return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
			}
		}
		if h.sig.Closed() {
			delete(c.holds, k) // lost: take the key afresh
			return nil, nil
		}
		if h.mode == engine.Shared && mode == engine.Exclusive {
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %q", ErrUpgrade, k.key)
		}
		h.count++
		c.mu.Unlock()
		return &Lease{h: h}, nil
	}
}

// newHold returns a hold of key, not yet acquired, counting one lease.
// With an owner it is not ready until its acquire settles.
func (c *Client) newHold(key string, mode engine.Mode, owner uint64, s settings) *hold {
	ready := closedChan
	if owner != 0 {
		ready = make(chan struct{})
	}
	return &hold{c: c, key: key, mode: mode, owner: owner, count: 1, ready: ready, obs: s.observer,
		limit: s.holdLimit}
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// forget drops h from the reentrancy table if it is still there.
func (c *Client) forget(h *hold) {
	if h.owner == 0 {
		return
	}
	c.mu.Lock()
	k := holdKey{h.owner, h.key}
	if c.holds[k] == h {
		delete(c.holds, k)
	}
	c.mu.Unlock()
}

// Ping checks that the engine's server answers.
func (c *Client) Ping(ctx context.Context) error { return c.eng.Ping(ctx) }

// Close closes the engine, which releases every lease it still holds and
// ends them with ErrClosed. Later calls return ErrClosed. Close is
// idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	// Not under c.mu: closing leases calls back into the client.
	return c.eng.Close()
}

// sortByKey orders leases by key; LockAll's parts are already sorted, this
// keeps newMulti honest for any caller.
func sortByKey(ls []*Lease) {
	slices.SortFunc(ls, func(a, b *Lease) int { return cmp.Compare(a.Key(), b.Key()) })
}

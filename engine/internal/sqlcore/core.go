package sqlcore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// Dialect is what an SQL engine supplies to the lease strategy: one grant
// attempt, its undo, a release, a renewal, and the classification of its
// driver's errors. Every call is bounded by the ctx it gets; none retries.
type Dialect interface {
	// Grant makes one grant attempt of req for owner and returns the
	// lease's token and true, or false if the key is held or a ticket
	// ahead of a's blocks it (see Attempt). a is kept across the
	// attempts of one acquisition.
	Grant(ctx context.Context, req engine.Request, owner string, a *Attempt) (uint64, bool, error)
	// Enqueue clears the key's expired tickets and adds a ticket for req
	// and owner, above every ticket before it, that expires ttl from now
	// on the server's clock, and returns its number (above 0).
	Enqueue(ctx context.Context, req engine.Request, owner string, ttl time.Duration) (uint64, error)
	// Queued reports how many unexpired tickets of req's key below ticket
	// block req (BlockedByAll), and whether ticket itself is unexpired.
	// With refresh it first sets the expiry of every unexpired ticket of
	// the key whose owner is LIKE prefix (the engine's) to ttl from now.
	Queued(ctx context.Context, req engine.Request, ticket uint64, prefix string, ttl time.Duration,
		refresh bool) (int, bool, error)
	// Dequeue deletes the ticket of key and owner, if any. Best effort.
	Dequeue(ctx context.Context, key, owner string)
	// Undo clears the grant of req to owner, if the server made it, with
	// a statement that names owner: a grant whose outcome is unknown.
	// Best effort.
	Undo(ctx context.Context, req engine.Request, owner string)
	// Release clears the lease (the key's row, or with engine.Shared its
	// reader row) if owner still holds it with token, unexpired by the
	// server's clock, and reports whether it did.
	Release(ctx context.Context, mode engine.Mode, key, owner string, token uint64) (bool, error)
	// Renew extends the unexpired leases named by keys and owners (the
	// key rows' or, with shared, the reader rows') by their own TTLs, in
	// one commit, and returns the owners it renewed. A nil map with a nil
	// error means that it renewed every one.
	Renew(ctx context.Context, shared bool, keys, owners []string) (map[string]bool, error)
	// Free clears, in one transaction, every unexpired lease of key (its
	// writer row and its reader rows), leaves a tombstone naming each
	// one's owner that expires that lease's TTL from now on the server's
	// clock (and deletes expired tombstones), and returns what it
	// cleared.
	Free(ctx context.Context, key string) ([]Freed, error)
	// Released reports which of owners have a tombstone (Free).
	Released(ctx context.Context, owners []string) (map[string]bool, error)
	// Transient reports errors after which a grant attempt is simply
	// repeated (a deadlock victim, a lock wait timeout).
	Transient(err error) bool
	// OpErr wraps a server failure of op on key, for a caller whose
	// context is ctx, as the engine's *engine.OpError.
	OpErr(ctx context.Context, op, key string, err error) error
}

// Config is what the core takes from the engine's options.
type Config struct {
	Name       string        // the engine's name, for engine.OpError
	OpTimeout  time.Duration // bounds each statement that does not wait for a lock
	MinBackoff time.Duration // the first polling delay of a waiting Acquire
	MaxBackoff time.Duration // the longest polling delay
	Renew      bool          // the engine uses the lease strategy: run the renewal loop
}

// Core is the shared part of an SQL engine. Make it with New.
type Core struct {
	// Mu guards Frame, and whatever state of its own the engine says.
	Mu sync.Mutex
	// Frame keeps the leases of every strategy of the engine, the calls
	// in progress, and the clean-ups and goroutines Close waits for.
	Frame kit.Base[engine.Lease]

	cfg  Config
	d    Dialect
	id   string // instance id, the prefix of every owner value
	seq  atomic.Uint64
	line lineup        // the engine's waiters in ticket order, per key
	kick chan struct{} // wakes the renewal loop
	pace kit.Pace      // whether renewal keeps up
	// every is the renewal interval, a third of the shortest TTL of the
	// renewed leases (0 while none is): each round sets it from the
	// leases it collects, and a grant lowers it for its new lease, both
	// under Mu, so that the loop never reads it by walking every lease
	// (a walk per grant cost seconds of CPU at 20,000 leases).
	every time.Duration
	// unreleased are leases whose release got no answer, for clearLater's
	// goroutine (running while it runs). Under Mu.
	unreleased []*lease
	clearing   bool
	// fresh is the earliest validity start (the grant's send time) of the
	// renewed leases granted since the last round collected the leases,
	// zero if none: the next round comes at the latest every after it
	// (kit.RenewRounds). Under Mu.
	fresh time.Time
}

// New returns a core on d; with cfg.Renew it starts the renewal loop,
// which Close stops.
func New(cfg Config, d Dialect) *Core {
	var b [8]byte
	_, _ = rand.Read(b[:])
	c := &Core{cfg: cfg, d: d, id: hex.EncodeToString(b[:]), kick: make(chan struct{}, 1)}
	c.Frame.Init(&c.Mu)
	if cfg.Renew {
		c.Frame.Go(func() {
			kit.RenewRounds(c.Frame.Closing(), c.kick, c.renewSchedule, c.renewAll, &c.pace)
		})
	}
	return c
}

// Owner returns a new owner value: unique per lease, at most 40 bytes of
// hex digits, a dash and decimal digits, so that it may be quoted into a
// statement.
func (c *Core) Owner() string {
	return fmt.Sprintf("%s-%d", c.id, c.seq.Add(1))
}

// OpCtx returns a context for one statement that must not be cut short by
// the caller's cancellation, so that the engine always learns whether a
// grant or release happened.
func (c *Core) OpCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.cfg.OpTimeout)
}

// Ping runs ping within ctx and the op timeout, and returns its failure as
// an OpError; engine.ErrClosed after Close.
func (c *Core) Ping(ctx context.Context, ping func(context.Context) error) error {
	if c.Frame.Closed() {
		return engine.ErrClosed
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	if err := ping(pctx); err != nil {
		return c.d.OpErr(ctx, "ping", "", err)
	}
	return nil
}

// Close shuts the frame: it releases every lease-strategy lease (each
// release bounded by the op timeout) and ends it with engine.ErrClosed,
// ends every other lease with end, and waits for the calls in progress
// and the engine's goroutines, the renewal loop among them. It reports
// whether this was the first Close; the engine closes its own resources
// after it.
func (c *Core) Close(end func(engine.Lease)) bool {
	held, first := c.Frame.Shut()
	if !first {
		return false
	}
	// Each end bounds its statement by the op timeout.
	kit.ReleaseAll(held, c.cfg.OpTimeout, func(_ context.Context, l engine.Lease) {
		if l, ok := l.(*lease); ok {
			l.end(engine.ErrClosed, true)
			return
		}
		end(l)
	})
	c.Frame.WaitCalls()
	c.Frame.Wait()
	return true
}

// Holders checks key against maxKeyLen and returns what read finds for it
// within ctx and the op timeout, as a call that Close waits for; see
// engine.Inspector. It returns engine.ErrClosed after Close.
func (c *Core) Holders(ctx context.Context, key string, maxKeyLen int,
	read func(ctx context.Context, key string) ([]engine.Holder, error)) ([]engine.Holder, error) {
	qctx, exit, err := c.EnterKey(ctx, key, maxKeyLen)
	if err != nil {
		return nil, err
	}
	defer exit()
	out, err := read(qctx, key)
	if err != nil {
		return nil, c.d.OpErr(ctx, "holders", key, err)
	}
	return out, nil
}

// EnterKey checks key against maxKeyLen, without I/O, and enters a call
// on key that Close waits for: it returns a context bounded by ctx and the
// op timeout, and exit, which the caller must call when the call returns.
// It returns engine.ErrClosed after Close, and ctx's error if ctx has
// ended.
func (c *Core) EnterKey(ctx context.Context, key string, maxKeyLen int) (context.Context, func(), error) {
	if err := engine.CheckKey(key, maxKeyLen); err != nil {
		return nil, nil, err
	}
	if err := c.Frame.Enter(ctx, nil); err != nil {
		if errors.Is(err, engine.ErrClosed) {
			return nil, nil, err
		}
		return nil, nil, ctx.Err()
	}
	qctx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	return qctx, func() { cancel(); c.Frame.Exit() }, nil
}

// RenewalSlack reports the room the last renewal round left (kit.Pace's
// Slack), for engine.RenewalReporter; ok is false without a renewed lease.
func (c *Core) RenewalSlack() (time.Duration, bool) { return c.pace.Slack() }

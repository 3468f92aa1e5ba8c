package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
)

// RedlockOption configures a Redlock engine.
type RedlockOption func(*redlockOptions)

type redlockOptions struct {
	nodeTimeout time.Duration
	driftFactor float64
	retryMax    time.Duration
	node        []Option
}

// Defaults of the Redlock options.
const (
	// DefaultNodeTimeout is the default WithNodeTimeout.
	DefaultNodeTimeout = 50 * time.Millisecond
	// DefaultDriftFactor is the default WithDriftFactor.
	DefaultDriftFactor = 0.01
	// DefaultRetryMax is the default WithRetryMax.
	DefaultRetryMax = 50 * time.Millisecond
)

// WithNodeTimeout bounds each node's answer to an acquire; a slower node
// counts as refusing. It should be small against the TTL. The default is
// DefaultNodeTimeout.
func WithNodeTimeout(d time.Duration) RedlockOption {
	return func(o *redlockOptions) { o.nodeTimeout = d }
}

// WithDriftFactor sets the clock drift allowed between nodes, as a fraction
// of the TTL; 2ms is added to it. The default is DefaultDriftFactor.
func WithDriftFactor(f float64) RedlockOption {
	return func(o *redlockOptions) { o.driftFactor = f }
}

// WithRetryMax caps the randomised pause between attempts of a waiting
// acquire. The default is DefaultRetryMax.
func WithRetryMax(d time.Duration) RedlockOption {
	return func(o *redlockOptions) { o.retryMax = d }
}

// WithNodeOptions passes options to the engine of every node, such as
// WithPrefix or WithTimeout. WithFair is refused: arrival order cannot be
// kept across independent nodes.
func WithNodeOptions(opts ...Option) RedlockOption {
	return func(o *redlockOptions) { o.node = append(o.node, opts...) }
}

// Redlock is an engine.Engine over N independent Redis masters, following
// the Redlock algorithm: a lock is granted when a majority (N/2+1) of the
// nodes grant it within a per-node timeout, and the lease is valid for the
// TTL minus the time the acquisition took minus the allowed clock drift. An
// attempt that falls short releases whatever it took on every node.
//
// Each node is a single-node Engine, with its own scripts and renewal loop;
// a renewed Redlock lease is lost when fewer than a majority of its node
// leases remain. Waiting polls with a randomised pause, since no single
// node can announce a release for all of them.
//
// When too few nodes answer, Ping and Acquire return an *engine.OpError that
// wraps engine.ErrUnavailable if a node was unavailable or gave no answer
// within the node timeout, and otherwise engine.ErrAccessDenied if a node
// refused access; never either once the caller's context has ended.
//
// Token is the largest fencing counter among the granting nodes, and right
// after each grant every granting node's counter is raised to it. Any two
// majorities share a node, so the next grant increments a counter that
// already holds the previous token: tokens strictly increase as long as no
// node loses its counter. They do not survive a node restarted without
// persistence or a failover to a replica that had not caught up; in that
// case a later grant can carry a smaller token, and a fenced resource would
// refuse its writes. Redis Cluster or a single node with AOF gives a firmer
// guarantee.
type Redlock struct {
	nodes   []*Engine
	clients []Client
	quorum  int
	opts    redlockOptions

	mu      sync.Mutex
	leases  map[*redlockLease]struct{}
	closed  bool
	closing chan struct{}
}

var _ engine.Engine = (*Redlock)(nil)

// raiseFence lifts a node's fencing counter to a token granted elsewhere.
var raiseFence = goredis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
`)

// NewRedlock returns a Redlock engine over clients, one per independent
// master; use an odd number, at least 3. It does no I/O. Close does not
// close the clients.
func NewRedlock(clients []Client, opts ...RedlockOption) (*Redlock, error) {
	if len(clients) < 3 {
		return nil, fmt.Errorf("%w: redlock: %d nodes; use at least 3 (an odd number)",
			engine.ErrInvalidRequest, len(clients))
	}
	o := redlockOptions{nodeTimeout: DefaultNodeTimeout, driftFactor: DefaultDriftFactor,
		retryMax: DefaultRetryMax}
	for _, opt := range opts {
		opt(&o)
	}
	probe := options{}
	for _, opt := range o.node {
		opt(&probe)
	}
	switch {
	case probe.fair:
		return nil, fmt.Errorf("%w: redlock: fair mode cannot order waiters across independent nodes",
			engine.ErrInvalidRequest)
	case o.nodeTimeout <= 0:
		return nil, fmt.Errorf("%w: redlock: node timeout %v is not positive", engine.ErrInvalidRequest,
			o.nodeTimeout)
	case o.driftFactor < 0 || o.driftFactor >= 0.5:
		return nil, fmt.Errorf("%w: redlock: drift factor %v is outside [0, 0.5)",
			engine.ErrInvalidRequest, o.driftFactor)
	case o.retryMax < time.Millisecond:
		return nil, fmt.Errorf("%w: redlock: retry cap %v is under 1ms", engine.ErrInvalidRequest,
			o.retryMax)
	}
	r := &Redlock{clients: clients, quorum: len(clients)/2 + 1, opts: o,
		leases: make(map[*redlockLease]struct{}), closing: make(chan struct{})}
	for i, c := range clients {
		e, err := New(c, o.node...)
		if err != nil {
			for _, n := range r.nodes {
				_ = n.Close()
			}
			return nil, fmt.Errorf("redlock node %d: %w", i, err)
		}
		r.nodes = append(r.nodes, e)
	}
	return r, nil
}

// Name returns "redlock".
func (r *Redlock) Name() string { return "redlock" }

// Limits are the single-node engine's.
func (r *Redlock) Limits() engine.Limits { return r.nodes[0].Limits() }

// Validate checks req as a single node would. A TTL too short for the
// nodes to answer in is not refused here: its validity comes out negative
// and the attempt counts as failed, as the algorithm prescribes.
func (r *Redlock) Validate(req engine.Request) error { return r.nodes[0].Validate(req) }

func (r *Redlock) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*r.opts.driftFactor) + 2*time.Millisecond
}

// Ping succeeds when a majority of the nodes answer.
func (r *Redlock) Ping(ctx context.Context) error {
	if r.isClosed() {
		return engine.ErrClosed
	}
	errs := r.each(func(i int) error { return r.nodes[i].Ping(ctx) })
	if ok := countNil(errs); ok < r.quorum {
		return r.quorumErr(ctx, "ping", "",
			fmt.Sprintf("%d of %d nodes answer, %d needed", ok, len(r.nodes), r.quorum), errs)
	}
	return nil
}

// quorumErr reports an operation that too few nodes carried out, marked by
// the rule of engine.ErrUnavailable applied to the nodes' failures:
// ErrUnavailable when a node was unavailable, otherwise ErrAccessDenied
// when a node refused access, and neither when ctx, the caller's context,
// has ended. The nodes' errors are kept as text only, so that their own
// marks cannot contradict the verdict.
func (r *Redlock) quorumErr(ctx context.Context, op, key, what string, errs []error) error {
	var unavailable, denied bool
	var nodes []string
	for i, err := range errs {
		if err == nil {
			continue
		}
		unavailable = unavailable || errors.Is(err, engine.ErrUnavailable)
		denied = denied || errors.Is(err, engine.ErrAccessDenied)
		nodes = append(nodes, fmt.Sprintf("node %d: %v", i, err))
	}
	cause := fmt.Errorf("%s: %s", what, strings.Join(nodes, "; "))
	err := engine.Classify(ctx, cause,
		func(error) bool { return denied && !unavailable },
		func(error) bool { return unavailable })
	return &engine.OpError{Engine: "redlock", Op: op, Key: key, Err: err}
}

func (r *Redlock) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// each runs f for every node concurrently and returns their errors.
func (r *Redlock) each(f func(i int) error) []error {
	errs := make([]error, len(r.nodes))
	var wg sync.WaitGroup
	for i := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errs
}

func countNil(errs []error) int {
	n := 0
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	return n
}

// Acquire takes the lock on a majority of nodes; see engine.Engine.
func (r *Redlock) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := r.Validate(req); err != nil {
		return nil, err
	}
	if r.isClosed() {
		return nil, engine.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(engine.ErrNotAcquired, err)
	}
	for {
		l, err := r.attempt(ctx, req)
		if l != nil || err != nil {
			return l, err
		}
		if !req.Wait {
			return nil, fmt.Errorf("%w: %q is held on a majority of nodes", engine.ErrNotAcquired, req.Key)
		}
		pause := time.Duration(rand.Int64N(int64(r.opts.retryMax))) + time.Millisecond
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
		case <-r.closing:
			t.Stop()
			return nil, engine.ErrClosed
		}
	}
}

// attempt asks every node once. It returns the lease on success, (nil, nil)
// when the lock is held, or an error that ends the acquisition.
func (r *Redlock) attempt(ctx context.Context, req engine.Request) (engine.Lease, error) {
	rl := &redlockLease{r: r, key: req.Key, mode: req.Mode, sig: engine.NewSignal(req.OnLost)}
	nodeReq := req
	nodeReq.Wait = false
	nodeReq.OnLost = rl.nodeLost
	parts := make([]engine.Lease, len(r.nodes))
	start := time.Now()
	errs := r.each(func(i int) error {
		nctx, cancel := context.WithTimeout(ctx, r.opts.nodeTimeout)
		defer cancel()
		l, err := r.nodes[i].Acquire(nctx, nodeReq)
		parts[i] = l
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// The node timeout is the engine's own deadline, not the
			// caller's: a node that did not answer in it is unavailable.
			// (One that answered "held" just after it did answer.)
			err = fmt.Errorf("%w: no answer within the node timeout %v: %v", engine.ErrUnavailable,
				r.opts.nodeTimeout, err)
		}
		return err
	})
	validity := req.TTL - time.Since(start) - r.drift(req.TTL)
	granted := countNil(errs)
	if granted >= r.quorum && validity > 0 {
		rl.mu.Lock()
		for _, p := range parts {
			if p != nil {
				rl.parts = append(rl.parts, p)
				rl.token = max(rl.token, p.Token())
			}
		}
		rl.alive = len(rl.parts) - rl.lostEarly
		rl.mu.Unlock()
		r.raise(ctx, req.Key, rl.token, errs)
		return r.granted(rl, req, start.Add(validity))
	}
	// Short of a majority, or too slow: give back what was taken.
	cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.nodeTimeout*4)
	defer cancel()
	r.each(func(i int) error {
		if parts[i] != nil {
			return parts[i].Release(cleanup)
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(engine.ErrNotAcquired, err)
	}
	refused := 0
	for _, err := range errs {
		if errors.Is(err, engine.ErrNotAcquired) {
			refused++
		}
	}
	if refused == 0 && granted < r.quorum {
		return nil, r.quorumErr(ctx, "acquire", req.Key,
			fmt.Sprintf("%d of %d nodes granted, %d needed", granted, len(r.nodes), r.quorum), errs)
	}
	return nil, nil
}

// raise lifts the fencing counter of every granting node to token.
func (r *Redlock) raise(ctx context.Context, key string, token uint64, errs []error) {
	r.each(func(i int) error {
		if errs[i] != nil {
			return nil
		}
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.nodeTimeout)
		defer cancel()
		return raiseFence.Run(nctx, r.clients[i], []string{r.nodes[i].keysOf(key).f}, token).Err()
	})
}

func (r *Redlock) granted(rl *redlockLease, req engine.Request,
	validUntil time.Time) (engine.Lease, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		rl.releaseParts(context.Background())
		return nil, engine.ErrClosed
	}
	r.leases[rl] = struct{}{}
	if !req.Renew {
		rl.timer = time.AfterFunc(time.Until(validUntil), func() { rl.end(engine.ErrLeaseLost) })
	}
	r.mu.Unlock()
	return rl, nil
}

// Close ends every lease with engine.ErrClosed and closes the node engines,
// which release what they hold. It does not close the clients.
func (r *Redlock) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.closing)
	held := make([]*redlockLease, 0, len(r.leases))
	for l := range r.leases {
		held = append(held, l)
	}
	r.mu.Unlock()
	for _, l := range held {
		l.end(engine.ErrClosed)
	}
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// redlockLease is a lease held on a majority of nodes.
type redlockLease struct {
	r     *Redlock
	key   string
	mode  engine.Mode
	token uint64
	sig   *engine.Signal
	parts []engine.Lease // the granting nodes' leases

	mu        sync.Mutex
	alive     int // node leases not yet lost
	lostEarly int // node leases lost before the grant was complete
	timer     *time.Timer
}

func (l *redlockLease) Key() string           { return l.key }
func (l *redlockLease) Mode() engine.Mode     { return l.mode }
func (l *redlockLease) Token() uint64         { return l.token }
func (l *redlockLease) Done() <-chan struct{} { return l.sig.Done() }
func (l *redlockLease) Err() error            { return l.sig.Err() }

// nodeLost is each node lease's OnLost: below a majority, the lease is lost.
func (l *redlockLease) nodeLost(err error) {
	l.mu.Lock()
	if l.parts == nil {
		l.lostEarly++
	}
	l.alive--
	below := l.alive < l.r.quorum && l.parts != nil
	l.mu.Unlock()
	if below {
		l.end(fmt.Errorf("%w: fewer than %d nodes still hold it: %w", engine.ErrLeaseLost, l.r.quorum,
			err))
	}
}

// end closes the lease with err, releasing what the nodes still hold.
func (l *redlockLease) end(err error) {
	l.r.mu.Lock()
	_, tracked := l.r.leases[l]
	delete(l.r.leases, l)
	l.r.mu.Unlock()
	if !tracked {
		return
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	if !errors.Is(err, engine.ErrClosed) {
		ctx, cancel := context.WithTimeout(context.Background(), l.r.opts.nodeTimeout*4)
		l.releaseParts(ctx)
		cancel()
	}
	l.sig.Close(err)
}

func (l *redlockLease) releaseParts(ctx context.Context) int {
	l.mu.Lock()
	parts := l.parts
	l.mu.Unlock()
	released := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p.Release(ctx) == nil {
				mu.Lock()
				released++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return released
}

// Release gives the key up on every node. It succeeds when a majority of
// the node leases were still held.
func (l *redlockLease) Release(ctx context.Context) error {
	l.r.mu.Lock()
	_, tracked := l.r.leases[l]
	delete(l.r.leases, l)
	l.r.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
	}
	released := l.releaseParts(ctx)
	if tracked && released >= l.r.quorum {
		l.sig.Close(engine.ErrReleased)
		return nil
	}
	l.sig.Close(engine.ErrLeaseLost)
	return fmt.Errorf("%w: %q held on %d nodes, %d needed (lease ended: %w)", engine.ErrNotHeld, l.key,
		released, l.r.quorum, l.sig.Err())
}

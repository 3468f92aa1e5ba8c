package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// RedlockOption configures a Redlock engine.
type RedlockOption func(*redlockOptions)

type redlockOptions struct {
	nodeTimeout time.Duration // WithNodeTimeout's; see nodeWait
	fixedNode   bool          // WithNodeTimeout was given
	driftFactor float64
	maxPause    time.Duration
	node        []Option
}

// Defaults of the Redlock options.
const (
	// DefaultNodeTimeout is the least a node's answer is awaited without
	// WithNodeTimeout.
	DefaultNodeTimeout = 50 * time.Millisecond
	// MaxDefaultNodeTimeout is the most a node's answer is awaited without
	// WithNodeTimeout.
	MaxDefaultNodeTimeout = 500 * time.Millisecond
	// DefaultDriftFactor is the default WithDriftFactor.
	DefaultDriftFactor = 0.01
	// DefaultMaxRetryPause is the default WithMaxRetryPause.
	DefaultMaxRetryPause = 50 * time.Millisecond
)

// WithNodeTimeout bounds each node's answer to an acquire; a slower node
// counts as unavailable. It should be small against the TTL, since the
// time an acquire takes comes off the lease's validity. Without it a node's
// answer is awaited for a twentieth of the lease's TTL (the factor
// go-redsync uses), at least DefaultNodeTimeout and at most
// MaxDefaultNodeTimeout: a fixed 50ms left no room for a first
// acquire's connection set-up on a loaded host.
func WithNodeTimeout(d time.Duration) RedlockOption {
	return func(o *redlockOptions) { o.nodeTimeout, o.fixedNode = d, true }
}

// nodeWait is how long an acquire of a lease of ttl waits for one node's
// answer (see WithNodeTimeout); ttl 0 gives the shortest default.
func (o *redlockOptions) nodeWait(ttl time.Duration) time.Duration {
	if o.fixedNode {
		return o.nodeTimeout
	}
	return min(max(ttl/20, DefaultNodeTimeout), MaxDefaultNodeTimeout)
}

// WithDriftFactor sets the clock drift allowed between nodes, as a fraction
// of the TTL; 2ms is added to it. The default is DefaultDriftFactor.
func WithDriftFactor(f float64) RedlockOption {
	return func(o *redlockOptions) { o.driftFactor = f }
}

// WithMaxRetryPause caps the randomised pause between attempts of a waiting
// acquire. The default is DefaultMaxRetryPause.
func WithMaxRetryPause(d time.Duration) RedlockOption {
	return func(o *redlockOptions) { o.maxPause = d }
}

// WithNodeOptions passes options to the engine of every node, such as
// WithPrefix or WithOpTimeout. WithFair is refused: arrival order cannot be
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
// Each node is a single-node Engine, with its own scripts and renewal loop.
// Waiting polls with a randomised pause, since no single node can announce
// a release for all of them.
//
// A renewed lease heals: it re-takes, with the acquisition's compare-and-set
// (only if the key is free there), every node it does not hold, at once
// after the grant, at once when a node's renewal finds the key gone (a node
// restarted without persistence) or fails, and then every renewal interval
// (TTL/3) while any node is missing. So it holds as many nodes as it can,
// not only the ones that granted it, and outlives any number of node
// restarts that come more than a renewal interval apart, as long as a
// majority of the nodes keeps its key at every moment. A node held by
// someone else does not count, nor does a node where this lease's own key
// outlived a failed renewal, until that key expires. A lease that falls short of a majority
// keeps its validity for one re-take round (at most three node timeouts)
// and ends with ErrLeaseLost if that round does not bring it back
// to a majority. Fixed-TTL leases keep the nodes that granted them. The
// lease's Nodes method (see engine.NodeCounter) tells how many nodes hold it.
//
// When too few nodes answer, Ping and Acquire return an *engine.OpError that
// wraps engine.ErrUnavailable if a node was unavailable or gave no answer
// within the node timeout, and otherwise engine.ErrAccessDenied if a node
// refused access; never either once the caller's context has ended.
//
// Token is the largest fencing counter among the granting nodes, and right
// after each grant the counter of every node that answered, granting or
// not, is raised to it; a node re-taken later counts only once its counter
// has been raised to the token too. The token never changes during the
// lease. Any two majorities share a node, so the next grant increments a
// counter that already holds the previous token. Should every node of the
// next majority have lost its counter since (restarted without
// persistence, flushed, or failed over to a replica that had not caught
// up), their counters start again from their clocks (see "Fencing tokens"
// in the package documentation), above the previous token as long as
// their clocks are not behind the clock of the node whose counter gave it
// by more than the time between the two grants: tokens strictly increase.
// TestRedlockTokensAfterMajorityRestart restarts three nodes of five and
// has them alone grant the next lease.
//
// Two holders can still overlap when nodes lose their keys: see "Redlock"
// in the package documentation for the window and its bound.
type Redlock struct {
	nodes   []*Engine
	clients []Client
	quorum  int
	opts    redlockOptions

	frame kit.Base[*redlockLease] // the leases; re-take rounds, which Close waits for

	healSlots chan struct{} // healParallel re-take rounds at most
}

var _ engine.Engine = (*Redlock)(nil)

// raiseFence lifts a node's fencing counter to a token granted elsewhere.
var raiseFence = goredis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
`)

// adoptFence gives a node that a re-take (heal) granted the lease's own
// token: the node drew a token of its own, later and so larger, and a
// force release or inventory would report it for the lease. KEYS w f v;
// ARGV id token drawn. A writer that still holds the node, whose counter
// is still its own draw, has the counter set to the token (the counter is
// its token there; lowering it is safe: the lease's token is already the
// largest of a majority's counters, each at least it, so every later grant
// on a majority still draws above it; a counter some other grant raised
// meanwhile is left as it is); a reader has its entry in :v rewritten.
// Otherwise the counter is only raised to the token, as raiseFence does.
var adoptFence = goredis.NewScript(`
local t = tonumber(ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('SET', KEYS[2], ARGV[2]) end
  return 1
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < t then redis.call('SET', KEYS[2], ARGV[2]) end
local cur = redis.call('HGET', KEYS[3], ARGV[1])
if cur then
  local rest = string.match(cur, '^%d+ (.*)$') or ''
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[2] .. ' ' .. rest)
end
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
	o := redlockOptions{driftFactor: DefaultDriftFactor,
		maxPause: DefaultMaxRetryPause}
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
	case o.fixedNode && o.nodeTimeout <= 0:
		return nil, fmt.Errorf("%w: redlock: node timeout %v is not positive", engine.ErrInvalidRequest,
			o.nodeTimeout)
	case o.driftFactor < 0 || o.driftFactor >= 0.5:
		return nil, fmt.Errorf("%w: redlock: drift factor %v is outside [0, 0.5)",
			engine.ErrInvalidRequest, o.driftFactor)
	case o.maxPause < time.Millisecond:
		return nil, fmt.Errorf("%w: redlock: retry cap %v is under 1ms", engine.ErrInvalidRequest,
			o.maxPause)
	}
	r := &Redlock{clients: clients, quorum: len(clients)/2 + 1, opts: o,
		healSlots: make(chan struct{}, healParallel)}
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

// Limits are the single-node engine's, without its counted mode: a
// majority of independent nodes, each counting its own permits, does not
// bound the permits held across them, so Redlock refuses Request.Limit.
func (r *Redlock) Limits() engine.Limits {
	lim := r.nodes[0].Limits()
	lim.Counted = false
	return lim
}

// Validate checks req as a single node would, with Redlock's Limits. A
// TTL too short for the nodes to answer in is not refused here: its
// validity comes out negative and the attempt counts as failed, as the
// algorithm prescribes.
func (r *Redlock) Validate(req engine.Request) error { return engine.CheckRequest(req, r.Limits()) }

func (r *Redlock) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*r.opts.driftFactor) + 2*time.Millisecond
}

// Ping succeeds when a majority of the nodes answer.
func (r *Redlock) Ping(ctx context.Context) error {
	if r.frame.Closed() {
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

// each runs f for every node concurrently and returns their errors.
func (r *Redlock) each(f func(i int) error) []error {
	all := make([]int, len(r.nodes))
	for i := range all {
		all[i] = i
	}
	return r.eachOf(all, f)
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
	if err := r.frame.Begin(ctx, r.Validate(req)); err != nil {
		return nil, err
	}
	for {
		l, err := r.attempt(ctx, req)
		if l != nil || err != nil {
			return l, err
		}
		if !req.Wait {
			return nil, fmt.Errorf("%w: %q is held on a majority of nodes", engine.ErrNotAcquired, req.Key)
		}
		pause := time.Duration(rand.Int64N(int64(r.opts.maxPause))) + time.Millisecond
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
		case <-r.frame.Closing():
			t.Stop()
			return nil, engine.ErrClosed
		}
	}
}

// attempt asks every node once. It returns the lease on success, (nil, nil)
// when the lock is held, or an error that ends the acquisition.
func (r *Redlock) attempt(ctx context.Context, req engine.Request) (engine.Lease, error) {
	rl := newRedlockLease(r, req)
	holds := make([]*nodeHold, len(r.nodes))
	wait := rl.wait()
	start := time.Now()
	errs := r.each(func(i int) error {
		nctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		var err error
		holds[i], err = rl.acquireNode(nctx, i)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// The node timeout is the engine's own deadline, not the
			// caller's: a node that did not answer in it is unavailable.
			// (One that answered "held" just after it did answer.)
			err = fmt.Errorf("%w: no answer within the node timeout %v: %v", engine.ErrUnavailable,
				wait, err)
		}
		return err
	})
	validity := req.TTL - time.Since(start) - r.drift(req.TTL)
	got := rl.install(holds)
	if got >= r.quorum && validity > 0 {
		r.raise(ctx, req.Key, rl.Token(), errs, wait)
		return r.granted(rl, req, start.Add(validity))
	}
	// Short of a majority, or too slow: give back what was taken, and let
	// no node lease lost meanwhile start a re-take.
	rl.markEnded()
	cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait*4)
	defer cancel()
	r.each(func(i int) error {
		if holds[i] != nil {
			return holds[i].l.Release(cleanup)
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(engine.ErrNotAcquired, err)
	}
	granted, refused := countNil(errs), 0
	for _, err := range errs {
		if errors.Is(err, engine.ErrNotAcquired) {
			refused++
		}
	}
	if refused == 0 && granted < r.quorum {
		return nil, r.quorumErr(ctx, "acquire", req.Key,
			fmt.Sprintf("%d of %d nodes granted, %d needed", granted, len(r.nodes), r.quorum), errs)
	}
	if got >= r.quorum && !req.Wait {
		// A majority granted, but too slowly: no validity was left.
		return nil, fmt.Errorf("%w: %q: a majority granted it, but after %v of its %v TTL (drift %v): "+
			"no validity left", engine.ErrNotAcquired, req.Key, time.Since(start).Round(time.Millisecond),
			req.TTL, r.drift(req.TTL))
	}
	return nil, nil
}

// raise lifts the fencing counter of every node that answered the
// acquisition, granting or refusing, to token: a later grant on any
// majority that includes one of them then carries a larger token, even one
// that includes a node this lease never held.
func (r *Redlock) raise(ctx context.Context, key string, token uint64, errs []error, wait time.Duration) {
	r.each(func(i int) error {
		if errs[i] != nil && !errors.Is(errs[i], engine.ErrNotAcquired) {
			return nil
		}
		return r.raiseNode(ctx, i, key, token, wait)
	})
}

// raiseNode lifts node i's fencing counter for key to token, waiting for
// the node's answer for at most wait.
func (r *Redlock) raiseNode(ctx context.Context, i int, key string, token uint64, wait time.Duration) error {
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	return raiseFence.Run(nctx, r.clients[i], []string{r.nodes[i].keysOf(key).f}, token).Err()
}

// adoptNode gives node i's grant p of key the lease's token (adoptFence),
// waiting for the node's answer for at most wait.
func (r *Redlock) adoptNode(ctx context.Context, i int, key string, p engine.Lease, token uint64,
	wait time.Duration) error {
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	k := r.nodes[i].keysOf(key)
	return adoptFence.Run(nctx, r.clients[i], []string{k.w, k.f, k.v}, p.(*lease).id, token,
		strconv.FormatUint(p.Token(), 10)).Err()
}

// granted registers rl and arms its expiry, or for a renewed lease its
// first re-take round, at once when some node did not grant.
func (r *Redlock) granted(rl *redlockLease, req engine.Request, validUntil time.Time) (engine.Lease, error) {
	if err := r.frame.Track(rl, nil); err != nil {
		rl.markEnded()
		rl.releaseParts(context.Background())
		return nil, err
	}
	rl.mu.Lock()
	held := rl.held
	if !req.Renew {
		rl.timer = time.AfterFunc(time.Until(validUntil), func() { rl.end(engine.ErrLeaseLost) })
	}
	rl.mu.Unlock()
	switch {
	case req.Renew && held < len(r.nodes):
		rl.scheduleHeal(0)
	case held < r.quorum: // nodes lost between their grant and now
		rl.end(fmt.Errorf("%w: fewer than %d nodes still hold it", engine.ErrLeaseLost, r.quorum))
	}
	return rl, nil
}

// Close ends every lease with engine.ErrClosed and closes the node engines,
// which release what they hold. It does not close the clients.
func (r *Redlock) Close() error {
	held, first := r.frame.Shut()
	if !first {
		return nil
	}
	for _, l := range held {
		l.markEnded() // the node engines release the parts
		l.Signal.Close(engine.ErrClosed)
	}
	r.frame.Wait() // re-take rounds in flight; each is bounded by the node timeout
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// redlockLease is a lease held on a majority of nodes.
type redlockLease struct {
	kit.LeaseCore
	r       *Redlock
	nodeReq engine.Request // what each node is asked: req without waiting

	healMu sync.Mutex // one re-take round of this lease at a time

	mu        sync.Mutex
	parts     []*nodeHold // by node; nil where this lease holds nothing
	held      int         // non-nil parts
	ended     bool        // released or lost: take nothing more
	timer     *time.Timer // local expiry (fixed leases)
	healTimer *time.Timer // next re-take round (renewed leases)
}

// nodeHold is one node's lease, from the moment it is asked for.
type nodeHold struct {
	l    engine.Lease
	lost bool // its OnLost has run; guarded by the redlockLease's mu
}

func newRedlockLease(r *Redlock, req engine.Request) *redlockLease {
	nodeReq := req
	nodeReq.Wait, nodeReq.OnLost = false, nil
	return &redlockLease{LeaseCore: kit.NewLeaseCore(req.Key, req.Mode, req.OnLost), r: r, nodeReq: nodeReq}
}

// wait is how long the lease waits for one node's answer (nodeWait).
func (l *redlockLease) wait() time.Duration { return l.r.opts.nodeWait(l.nodeReq.TTL) }

func (l *redlockLease) Done() <-chan struct{} { return l.Signal.Done() }
func (l *redlockLease) Err() error            { return l.Signal.Err() }

// Nodes reports how many nodes hold the lease now and how many there are;
// see engine.NodeCounter.
func (l *redlockLease) Nodes() (held, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return 0, len(l.r.nodes)
	}
	return l.held, len(l.r.nodes)
}

// acquireNode asks node i once for the key. A refusal returns (nil, err).
func (l *redlockLease) acquireNode(ctx context.Context, i int) (*nodeHold, error) {
	h := &nodeHold{}
	req := l.nodeReq
	req.OnLost = func(err error) { l.nodeLost(i, h, err) }
	p, err := l.r.nodes[i].Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	h.l = p
	return h, nil
}

// install records the grant's node leases, all but those already lost,
// sets the token to the largest of their counters, and returns how many
// it recorded.
func (l *redlockLease) install(holds []*nodeHold) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.parts = make([]*nodeHold, len(holds))
	for i, h := range holds {
		if h != nil && !h.lost {
			l.parts[i] = h
			l.held++
			l.SetToken(max(l.Token(), h.l.Token()))
		}
	}
	return l.held
}

// nodeLost is each node lease's OnLost. A renewed lease tries at once to
// take the node again (and any other it lacks), and ends if that leaves it
// short of a majority; a fixed lease ends as soon as it is short.
func (l *redlockLease) nodeLost(i int, h *nodeHold, err error) {
	l.mu.Lock()
	h.lost = true
	was := l.parts != nil && l.parts[i] == h && !l.ended
	if was {
		l.parts[i] = nil
		l.held--
	}
	below := l.held < l.r.quorum
	l.mu.Unlock()
	switch {
	case !was:
	case errors.Is(err, engine.ErrReleasedByOperator):
		// Freed on purpose: taking the node again would fight the
		// operator (and the next holder) for the key.
		l.end(fmt.Errorf("%w: on node %d: %w", engine.ErrReleasedByOperator, i, err))
	case l.nodeReq.Renew:
		l.scheduleHeal(0)
	case below:
		l.end(fmt.Errorf("%w: fewer than %d nodes still hold it: %w", engine.ErrLeaseLost, l.r.quorum, err))
	}
}

// stop marks the lease ended and stops its timers. It reports whether the
// lease was still tracked by the engine.
func (l *redlockLease) stop() bool {
	tracked := l.r.frame.Forget(l)
	if tracked {
		l.markEnded()
	}
	return tracked
}

// markEnded stops the lease's timers and any later re-take.
func (l *redlockLease) markEnded() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	for _, t := range []*time.Timer{l.timer, l.healTimer} {
		if t != nil {
			t.Stop()
		}
	}
}

// end closes the lease with err, releasing what the nodes still hold.
func (l *redlockLease) end(err error) {
	if !l.stop() {
		return
	}
	if !errors.Is(err, engine.ErrClosed) {
		ctx, cancel := context.WithTimeout(context.Background(), l.wait()*4)
		l.releaseParts(ctx)
		cancel()
	}
	l.Signal.Close(err)
}

func (l *redlockLease) releaseParts(ctx context.Context) int {
	l.mu.Lock()
	var parts []engine.Lease
	for _, h := range l.parts {
		if h != nil {
			parts = append(parts, h.l)
		}
	}
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
	tracked := l.stop()
	released := l.releaseParts(ctx)
	if tracked && released >= l.r.quorum {
		l.Signal.Close(engine.ErrReleased)
		return nil
	}
	l.Signal.Close(engine.ErrLeaseLost)
	return fmt.Errorf("%w: %q held on %d nodes, %d needed (lease ended: %w)", engine.ErrNotHeld, l.Key(),
		released, l.r.quorum, l.Signal.Err())
}

package enginetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// Factory returns a new engine instance with its own connections to the
// server under test. The suite closes every engine it makes.
type Factory func() (engine.Engine, error)

// Options tune the suite for an engine. The zero value is the default.
type Options struct {
	// Clients is the number of engine instances in the mutual-exclusion
	// check. The default, and the least accepted, is 8.
	Clients int
	// Rounds is how many times each client acquires the shared key in that
	// check. The default, and the least accepted, is 200.
	Rounds int
	// TTL is the short lease used where expiry and renewal are checked. The
	// default is 300ms, raised to the engine's Limits().MinTTL.
	TTL time.Duration
	// Leftovers, if set, lists what the server still stores for key: nodes,
	// rows, KV entries. After a key is released and its waiters have gone it
	// must return nothing. Without it the suite checks only that the key can
	// be acquired at once.
	Leftovers func(ctx context.Context, key string) ([]string, error)
	// Unreachable, if set, makes an engine whose server cannot be reached,
	// such as one pointed at a loopback port where nothing listens. Invalid
	// requests to it must fail with the validation error, which shows that
	// validation comes before any I/O; valid ones must fail promptly with
	// an *engine.OpError wrapping engine.ErrUnavailable, unless the
	// caller's context ends first. Every engine with a server sets it; the
	// memory engine cannot be unavailable and leaves it nil.
	Unreachable Factory
	// AccessDenied, if set, makes an engine that the server refuses by its
	// access control: a wrong password or token, or credentials without
	// the permissions the engine needs. Its Acquire calls must fail
	// promptly with an *engine.OpError wrapping engine.ErrAccessDenied and
	// not engine.ErrUnavailable, and its Ping must not report
	// ErrUnavailable. The memory engine has no access control and leaves
	// it nil.
	AccessDenied Factory
	// Unordered, if not empty, says why the engine cannot serve waiters in
	// arrival order (Redlock: no queue spans independent nodes). The
	// Fairness check then requires only that every client is served (no
	// starvation to zero) instead of a min/max of 0.8, and logs the
	// reason. Every other engine leaves it empty.
	Unordered string
}

// T is the part of *testing.T the checks use.
type T interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Cleanup(func())
}

var _ T = (*testing.T)(nil)

// Run runs every check against engines from newEngine, each as a subtest.
func Run(t *testing.T, newEngine Factory, opts Options) {
	t.Helper()
	run := runID()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			c.fn(newHarness(t, newEngine, opts, run, c.name))
		})
	}
}

// check is one entry in the table of conformance checks.
type check struct {
	name string
	fn   func(h *harness)
}

// checks is the table Run walks. Each entry covers one of the semantics the
// package engine documentation lists; the suite's self-test names the
// broken engine each one catches.
var checks = []check{
	{"Validation", checkValidation},
	{"LeaseFields", checkLeaseFields},
	{"MutualExclusion", checkMutualExclusion},
	{"TryLockHeld", checkTryLockHeld},
	{"WaitWokenByRelease", checkWaitWoken},
	{"WaitDeadline", checkWaitDeadline},
	{"WaitCancel", checkWaitCancel},
	{"CancelledBeforeAcquire", checkCancelledBefore},
	{"StaleRelease", checkStaleRelease},
	{"DoubleRelease", checkDoubleRelease},
	{"TTLExpiry", checkTTLExpiry},
	{"Renewal", checkRenewal},
	{"TokensIncrease", checkTokens},
	{"SharedMode", checkShared},
	{"SharedStress", checkSharedStress},
	{"Close", checkClose},
	{"Fairness", checkFairness},
	{"Semaphore", checkSemaphore},
	{"Election", checkElection},
	{"ElectionTakeover", checkElectionTakeover},
	{"WatchRightAfter", checkWatchRightAfter},
	{"Unreachable", checkUnreachable},
	{"AccessDenied", checkAccessDenied},
}

// harness carries what a check needs: engines, keys, the options.
type harness struct {
	t         T
	newEngine Factory
	opts      Options
	prefix    string
	n         atomic.Int64
	limits    engine.Limits
	limitsSet sync.Once
}

// longTTL is the lease period of renewed leases that are not meant to
// expire during a check: above every engine's floor (Consul's is 30s with
// its defaults).
const longTTL = time.Minute

// hang is how long a call may take before the suite calls it hung. It is a
// liveness bound, not a speed target.
const hang = 20 * time.Second

func newHarness(t T, f Factory, opts Options, run, name string) *harness {
	if opts.Clients < 8 {
		opts.Clients = 8
	}
	if opts.Rounds < 200 {
		opts.Rounds = 200
	}
	if opts.TTL <= 0 {
		opts.TTL = 300 * time.Millisecond
	}
	return &harness{t: t, newEngine: f, opts: opts, prefix: "cerberus-test/" + run + "/" + name}
}

func runID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// engine makes a new engine instance, closed when the check ends.
func (h *harness) engine() engine.Engine {
	h.t.Helper()
	e := h.make(h.newEngine, "new engine")
	h.limitsSet.Do(func() { h.limits = e.Limits() })
	return e
}

// make makes an engine with f, closed when the check ends; what names f in
// failures.
func (h *harness) make(f Factory, what string) engine.Engine {
	h.t.Helper()
	e, err := f()
	if err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
	if e == nil {
		h.t.Fatalf("%s: factory returned nil", what)
	}
	h.t.Cleanup(func() { _ = e.Close() })
	return e
}

// ttl is the short lease period for expiry checks.
func (h *harness) ttl() time.Duration {
	if h.opts.TTL < h.limits.MinTTL {
		return h.limits.MinTTL
	}
	return h.opts.TTL
}

// key returns a key unique to this run and check.
func (h *harness) key() string {
	return fmt.Sprintf("%s/%d", h.prefix, h.n.Add(1))
}

// hold is a request for a renewed exclusive lease, waiting.
func hold(key string) engine.Request {
	return engine.Request{Key: key, Mode: engine.Exclusive, TTL: longTTL, Renew: true, Wait: true}
}

// try is hold without waiting.
func try(key string) engine.Request {
	r := hold(key)
	r.Wait = false
	return r
}

func shared(r engine.Request) engine.Request {
	r.Mode = engine.Shared
	return r
}

// ctx returns a context bounded by the hang limit.
func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	h.t.Cleanup(cancel)
	return ctx
}

// acquire takes a lease that must be granted.
func (h *harness) acquire(e engine.Engine, req engine.Request) engine.Lease {
	h.t.Helper()
	l, err := e.Acquire(h.ctx(), req)
	if err != nil {
		h.t.Fatalf("acquire %q (%v): %v", req.Key, req.Mode, err)
	}
	if l == nil {
		h.t.Fatalf("acquire %q: nil lease and nil error", req.Key)
	}
	return l
}

// release releases a lease that must still be held.
func (h *harness) release(l engine.Lease) {
	h.t.Helper()
	if err := l.Release(h.ctx()); err != nil {
		h.t.Fatalf("release %q: %v", l.Key(), err)
	}
}

// mustBeHeld fails unless another client's TryLock on key is refused with
// ErrNotAcquired.
func (h *harness) mustBeHeld(e engine.Engine, key string, mode engine.Mode) {
	h.t.Helper()
	req := try(key)
	req.Mode = mode
	l, err := e.Acquire(h.ctx(), req)
	if err == nil {
		_ = l.Release(context.Background())
		h.t.Fatalf("%q should be held, but a %v TryLock got it (token %d)", key, mode, l.Token())
	}
	if !errors.Is(err, engine.ErrNotAcquired) {
		h.t.Fatalf("TryLock on held %q: want ErrNotAcquired, got %v", key, err)
	}
}

// mustBeFree fails unless key can be taken at once and shows no leftovers
// after it is released again.
func (h *harness) mustBeFree(e engine.Engine, key string) {
	h.t.Helper()
	l, err := e.Acquire(h.ctx(), try(key))
	if err != nil {
		h.t.Fatalf("%q should be free, but TryLock failed: %v", key, err)
	}
	h.release(l)
	h.mustBeClean(key)
}

// mustBeClean fails if the server keeps anything for key.
func (h *harness) mustBeClean(key string) {
	h.t.Helper()
	if h.opts.Leftovers == nil {
		return
	}
	left, err := h.opts.Leftovers(h.ctx(), key)
	if err != nil {
		h.t.Fatalf("leftovers of %q: %v", key, err)
	}
	if len(left) > 0 {
		h.t.Fatalf("%q was released but the server still keeps: %s", key, strings.Join(left, ", "))
	}
}

// waitDone waits for l to end, failing after limit.
func (h *harness) waitDone(l engine.Lease, limit time.Duration, what string) {
	h.t.Helper()
	select {
	case <-l.Done():
	case <-time.After(limit):
		h.t.Fatalf("%s: Done() of %q did not close within %v", what, l.Key(), limit)
	}
}

// isDone reports whether l's Done channel is closed.
func isDone(l engine.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

// lostRecorder counts OnLost calls and keeps the last error.
type lostRecorder struct {
	mu    sync.Mutex
	calls int
	err   error
}

func (r *lostRecorder) onLost(err error) {
	r.mu.Lock()
	r.calls++
	r.err = err
	r.mu.Unlock()
}

func (r *lostRecorder) get() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, r.err
}

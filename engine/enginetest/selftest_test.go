package enginetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
)

// recorder is a T that records failures instead of failing the real test,
// so a check can be run against a broken engine and expected to fail.
type recorder struct {
	name     string
	mu       sync.Mutex
	failed   bool
	msgs     []string
	cleanups []func()
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return r.name }
func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, "log: "+fmt.Sprintf(format, args...))
}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// runCheck runs one named check against f with a recorder and returns it
// after the check's cleanups have run.
func runCheck(t *testing.T, name string, f Factory, opts Options) *recorder {
	t.Helper()
	var fn func(*harness)
	for _, c := range checks {
		if c.name == name {
			fn = c.fn
		}
	}
	if fn == nil {
		t.Fatalf("no check named %q", name)
	}
	r := &recorder{name: name}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(newHarness(r, f, opts, runID(), name))
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("check %s hung", name)
	}
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return r
}

// memoryFactory returns a factory of memory engines sharing one store.
func memoryFactory() Factory {
	store := memory.NewStore()
	return func() (engine.Engine, error) { return memory.New(memory.WithStore(store)), nil }
}

// broken wraps memory engines with one defect.
type broken struct {
	engine.Engine
	defect string
	reg    *registry
}

// registry is state shared by every broken engine of one factory, standing
// in for what a faulty server would get wrong.
type registry struct {
	mu      sync.Mutex
	holders map[string]engine.Lease // the latest lease granted per key
	fake    atomic.Uint64
}

func brokenFactory(defect string) Factory {
	inner := memoryFactory()
	reg := &registry{holders: make(map[string]engine.Lease)}
	return func() (engine.Engine, error) {
		e, err := inner()
		return &broken{Engine: e, defect: defect, reg: reg}, err
	}
}

// poll waits as a lock without a queue does: it tries, and sleeps between
// tries, so a holder that releases and locks again at once keeps winning.
func (b *broken) poll(ctx context.Context, req engine.Request) (engine.Lease, error) {
	req.Wait = false
	for {
		l, err := b.Engine.Acquire(ctx, req)
		if !errors.Is(err, engine.ErrNotAcquired) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (b *broken) Validate(req engine.Request) error {
	if b.defect == "no-validation" {
		return nil
	}
	return b.Engine.Validate(req)
}

func (b *broken) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	switch b.defect {
	case "no-validation":
		// Stores whatever it is given under a key it can hold.
		req.Key = strings.ToValidUTF8(strings.Map(func(r rune) rune {
			if r < 0x20 {
				return '_'
			}
			return r
		}, req.Key), "?")
		if req.Key == "" {
			req.Key = "empty"
		}
		if len(req.Key) > engine.MaxKeyLen {
			req.Key = req.Key[:engine.MaxKeyLen]
		}
		if req.TTL < engine.MinTTL || req.TTL > engine.MaxTTL {
			req.TTL = time.Second
		}
		req.Mode &= 1
	case "never-expires":
		req.Renew = true
	case "no-renewal":
		req.Renew = false
	case "shared-as-exclusive":
		req.Mode = engine.Exclusive
	case "uncounted":
		req.Limit = 0
	case "wait-ignores-ctx":
		if req.Wait {
			ctx = context.Background()
		}
	case "no-exclusion":
		req.Wait = false
	case "trylock-waits":
		if !req.Wait {
			req.Wait = true
		}
	case "barging":
		if req.Wait {
			return b.poll(ctx, req)
		}
	}
	l, err := b.Engine.Acquire(ctx, req)
	if err != nil && ctx.Err() != nil && b.defect == "cancel-is-unavailable" {
		// Blames the server for the caller's ended context.
		err = errors.Join(err, &engine.OpError{Engine: "broken", Op: "acquire", Key: req.Key, Err: engine.ErrUnavailable})
	}
	if errors.Is(err, engine.ErrNotAcquired) && b.defect == "no-exclusion" && ctx.Err() == nil {
		// Grants anyway, as a lock without a server-side check would.
		return &brokenLease{key: req.Key, mode: req.Mode, token: 1<<40 + b.reg.fake.Add(1), done: make(chan struct{})}, nil
	}
	if err != nil {
		return nil, err
	}
	bl := &brokenLease{Lease: l, b: b}
	b.reg.mu.Lock()
	b.reg.holders[req.Key] = l
	b.reg.mu.Unlock()
	return bl, nil
}

// Holders lists the inner engine's holders; with the defect
// "no-holders" it lists none.
func (b *broken) Holders(ctx context.Context, key string) ([]engine.Holder, error) {
	if b.defect == "no-holders" {
		return nil, engine.CheckKey(key, engine.MaxKeyLen)
	}
	return b.Engine.(engine.Inspector).Holders(ctx, key)
}

// Watch is the inner engine's; with the defect "late-watch" it starts
// watching only a while after it returned, so a change right after it is
// told only when something else changes or the watch ends.
func (b *broken) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	inner := b.Engine.(engine.Watcher)
	if b.defect != "late-watch" {
		return inner.Watch(ctx, key)
	}
	if err := engine.CheckKey(key, engine.MaxKeyLen); err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return
		}
		ch, err := inner.Watch(ctx, key)
		if err != nil {
			return
		}
		for range ch {
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}

func (b *broken) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil && b.defect == "cancel-is-unavailable" {
		return &engine.OpError{Engine: "broken", Op: "ping", Err: errors.Join(engine.ErrUnavailable, err)}
	}
	return b.Engine.Ping(ctx)
}

// offline stands in for an engine whose server is unreachable or refuses
// it: after validation and the caller's context, every Acquire and Ping
// fails with an *engine.OpError wrapping cause.
type offline struct {
	engine.Engine
	cause error
}

// offlineFactory makes offline engines failing with want; the defects
// "down-unmarked" and "denied-is-unavailable" mark the failure wrongly.
func offlineFactory(want error, defect string) Factory {
	cause := fmt.Errorf("%w: dial tcp 127.0.0.1:1: connection refused", want)
	switch defect {
	case "down-unmarked":
		cause = errors.New("dial tcp 127.0.0.1:1: connection refused")
	case "denied-is-unavailable":
		cause = errors.Join(want, engine.ErrUnavailable)
	}
	return func() (engine.Engine, error) { return &offline{Engine: memory.New(), cause: cause}, nil }
}

func (o *offline) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := o.Validate(req); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(engine.ErrNotAcquired, err)
	}
	return nil, &engine.OpError{Engine: "offline", Op: "acquire", Key: req.Key, Err: o.cause}
}

func (o *offline) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return &engine.OpError{Engine: "offline", Op: "ping", Err: o.cause}
}

// faultOptions are the suite's options with offline engines for the
// Unreachable and AccessDenied hooks, marked wrongly by defect if it is
// one of offlineFactory's.
func faultOptions(defect string) Options {
	return Options{
		Unreachable:  offlineFactory(engine.ErrUnavailable, defect),
		AccessDenied: offlineFactory(engine.ErrAccessDenied, defect),
	}
}

type brokenLease struct {
	engine.Lease
	b *broken
	// set only for the fake grants of "no-exclusion"
	key   string
	mode  engine.Mode
	token uint64
	done  chan struct{}
	// the delayed Done of "told-late"
	lateOnce sync.Once
	late     chan struct{}
}

func (l *brokenLease) Key() string {
	if l.Lease == nil {
		return l.key
	}
	return l.Lease.Key()
}

func (l *brokenLease) Mode() engine.Mode {
	if l.Lease == nil {
		return l.mode
	}
	return l.Lease.Mode()
}

func (l *brokenLease) Done() <-chan struct{} {
	if l.Lease == nil {
		return l.done
	}
	if l.b.defect == "told-late" {
		// Closes a second after the lease really ended: a holder that
		// goes on believing it leads after the server moved on.
		l.lateOnce.Do(func() {
			l.late = make(chan struct{})
			go func() {
				<-l.Lease.Done()
				time.Sleep(time.Second)
				close(l.late)
			}()
		})
		return l.late
	}
	return l.Lease.Done()
}

func (l *brokenLease) Err() error {
	if l.Lease == nil {
		return nil
	}
	return l.Lease.Err()
}

func (l *brokenLease) Token() uint64 {
	if l.Lease == nil {
		return l.token
	}
	if l.b.defect == "reused-tokens" {
		return 7
	}
	return l.Lease.Token()
}

func (l *brokenLease) Release(ctx context.Context) error {
	if l.Lease == nil {
		return nil
	}
	err := l.Lease.Release(ctx)
	if errors.Is(err, engine.ErrNotHeld) && l.b.defect == "no-owner-check" {
		// A plain DEL: frees the key whoever holds it.
		l.b.reg.mu.Lock()
		cur := l.b.reg.holders[l.Key()]
		l.b.reg.mu.Unlock()
		if cur != nil {
			_ = cur.Release(ctx)
		}
		return nil
	}
	return err
}

// TestSuiteCatchesBrokenEngines runs, for each defect, the check meant to
// catch it, and requires that check to fail. It also runs the same checks
// on the correct memory engine and requires them to pass, so a check that
// fails on everything does not count as catching anything.
func TestSuiteCatchesBrokenEngines(t *testing.T) {
	cases := []struct {
		defect string
		check  string
	}{
		{"no-validation", "Validation"},
		{"no-exclusion", "MutualExclusion"},
		{"no-exclusion", "TryLockHeld"},
		{"trylock-waits", "TryLockHeld"},
		{"wait-ignores-ctx", "WaitDeadline"},
		{"wait-ignores-ctx", "WaitCancel"},
		{"no-owner-check", "StaleRelease"},
		{"no-owner-check", "DoubleRelease"},
		{"never-expires", "TTLExpiry"},
		{"never-expires", "StaleRelease"},
		{"no-renewal", "Renewal"},
		{"reused-tokens", "TokensIncrease"},
		{"reused-tokens", "MutualExclusion"},
		{"shared-as-exclusive", "SharedMode"},
		{"cancel-is-unavailable", "WaitCancel"},
		{"cancel-is-unavailable", "WaitDeadline"},
		{"cancel-is-unavailable", "CancelledBeforeAcquire"},
		{"down-unmarked", "Unreachable"},
		{"denied-is-unavailable", "AccessDenied"},
		{"barging", "Fairness"},
		{"uncounted", "Semaphore"},
		{"no-holders", "Election"},
		{"no-holders", "Semaphore"},
		{"told-late", "ElectionTakeover"},
		{"never-expires", "ElectionTakeover"},
		{"late-watch", "WatchRightAfter"},
	}
	// These defects are caught only when the check's own time limit runs
	// out (6 to 10 seconds each): too slow for a quick run.
	slow := map[string]bool{"wait-ignores-ctx": true, "never-expires": true, "trylock-waits": true,
		"late-watch": true}
	for _, c := range cases {
		t.Run(c.defect+"/"+c.check, func(t *testing.T) {
			if slow[c.defect] && testing.Short() {
				t.Skip("caught only at the check's time limit; run without -short")
			}
			t.Parallel()
			good := runCheck(t, c.check, memoryFactory(), faultOptions(""))
			if good.Failed() {
				t.Fatalf("check %s fails on the correct memory engine:\n%s", c.check, strings.Join(good.msgs, "\n"))
			}
			bad := runCheck(t, c.check, brokenFactory(c.defect), faultOptions(c.defect))
			if !bad.Failed() {
				t.Fatalf("check %s passed an engine with defect %q", c.check, c.defect)
			}
			t.Logf("caught %s: %s", c.defect, bad.msgs[0])
		})
	}
}

// TestRecorderGoexit makes sure a Fatalf inside a check stops it, as
// testing.T does, so later steps do not run on a failed precondition.
func TestRecorderGoexit(t *testing.T) {
	ran := false
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Fatalf("stop")
		ran = true
	}()
	<-done
	if ran || !r.Failed() {
		t.Fatalf("Fatalf did not stop the check (ran %v, failed %v)", ran, r.Failed())
	}
}

package failover_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/failover"
)

// flaky wraps a real engine so that a test can make its Ping fail, as a
// server that stopped answering would. Everything else goes through.
type flaky struct {
	engine.Engine
	down     atomic.Bool
	failNext atomic.Int32 // Acquires that fail unavailable although the engine is up
	pings    atomic.Int32
}

func (f *flaky) Ping(ctx context.Context) error {
	f.pings.Add(1)
	if f.down.Load() {
		return &engine.OpError{Engine: "flaky", Op: "ping", Err: engine.ErrUnavailable}
	}
	return f.Engine.Ping(ctx)
}

func (f *flaky) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if f.down.Load() || f.failNext.Add(-1) >= 0 {
		return nil, &engine.OpError{Engine: "flaky", Op: "acquire", Key: req.Key, Err: engine.ErrUnavailable}
	}
	return f.Engine.Acquire(ctx, req)
}

// fleet is two engines, each on a store of its own (two servers), plus an
// outside client per store to look at what each server holds.
type fleet struct {
	a, b       *flaky
	outA, outB *cerberus.Client
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	sa, sb := memory.NewStore(), memory.NewStore()
	fl := &fleet{
		a: &flaky{Engine: memory.New(memory.WithStore(sa))},
		b: &flaky{Engine: memory.New(memory.WithStore(sb))},
	}
	var err error
	if fl.outA, err = cerberus.New(memory.New(memory.WithStore(sa))); err != nil {
		t.Fatal(err)
	}
	if fl.outB, err = cerberus.New(memory.New(memory.WithStore(sb))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fl.outA.Close(); _ = fl.outB.Close() })
	return fl
}

func (fl *fleet) client(t *testing.T, opts failover.Options) (*cerberus.Client, *failover.Manager) {
	t.Helper()
	f, err := failover.New([]failover.NamedEngine{{Name: "a", Engine: fl.a}, {Name: "b", Engine: fl.b}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, f
}

// eventually polls cond until it holds, failing after a bound: it orders
// the test by observed state, not by sleeping.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func freeOn(c *cerberus.Client, key string) bool {
	l, err := c.TryLock(context.Background(), key)
	if err != nil {
		return false
	}
	_ = l.Unlock(context.Background())
	return true
}

func TestSwitchEndsLeasesAndRaisesTokens(t *testing.T) {
	fl := newFleet(t)
	var events []failover.SwitchEvent
	var mu sync.Mutex
	c, f := fl.client(t, failover.Options{OnSwitch: func(e failover.SwitchEvent) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}})
	ctx := ctxT(t)
	// A high token on b's own counter must not let b's grants sort below
	// a's: the epoch comes first.
	for range 50 {
		l := must(t)(fl.outA.Lock(ctx, "warm"))
		_ = l.Unlock(ctx)
	}
	old := must(t)(c.Lock(ctx, "k"))
	if f.Active() != "a" || f.Epoch() != 0 {
		t.Fatalf("active %s epoch %d, want a and 0", f.Active(), f.Epoch())
	}
	if freeOn(fl.outA, "k") {
		t.Fatal("the lease is not held on engine a")
	}
	if err := f.SetActive("b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close on the switch")
	}
	if !errors.Is(old.Err(), cerberus.ErrEngineSwitched) {
		t.Fatalf("Err after a switch = %v, want ErrEngineSwitched", old.Err())
	}
	if err := old.Unlock(ctx); !errors.Is(err, cerberus.ErrNotHeld) || !errors.Is(err, cerberus.ErrEngineSwitched) {
		t.Fatalf("Unlock after a switch: want ErrNotHeld and ErrEngineSwitched, got %v", err)
	}
	eventually(t, "the old lease to be released on engine a", func() bool { return freeOn(fl.outA, "k") })
	next := must(t)(c.Lock(ctx, "k"))
	if next.Token() <= old.Token() {
		t.Fatalf("token after the switch %d, want > %d", next.Token(), old.Token())
	}
	if freeOn(fl.outB, "k") {
		t.Fatal("the new lease is not held on engine b")
	}
	mu.Lock()
	if len(events) != 1 || events[0].From != "a" || events[0].To != "b" || events[0].LostLeases != 1 || events[0].Reason != "operator" {
		t.Fatalf("switch events %+v", events)
	}
	mu.Unlock()
	_ = next.Unlock(ctx)
	if err := f.SetActive("nope"); !errors.Is(err, failover.ErrUnknownEngine) || f.Active() != "b" {
		t.Fatalf("SetActive(unknown): %v, active %s", err, f.Active())
	}
}

func TestAutoFailoverAndFailback(t *testing.T) {
	for _, failback := range []bool{false, true} {
		fl := newFleet(t)
		c, f := fl.client(t, failover.Options{Auto: true, Failback: failback, Interval: 10 * time.Millisecond, Threshold: 3})
		ctx := ctxT(t)
		l := must(t)(c.Lock(ctx, "k"))
		fl.a.down.Store(true)
		eventually(t, "the switch to b", func() bool { return f.Active() == "b" })
		<-l.Done()
		if !errors.Is(l.Err(), cerberus.ErrEngineSwitched) {
			t.Fatalf("Err = %v, want ErrEngineSwitched", l.Err())
		}
		st := f.Status()
		if st[0].Healthy || st[0].Failures < 3 || !st[1].Active || !st[1].Healthy {
			t.Fatalf("status after the failover: %+v", st)
		}
		onB := must(t)(c.Lock(ctx, "k"))
		fl.a.down.Store(false)
		eventually(t, "a to be healthy again", func() bool { return f.Status()[0].Healthy })
		if !failback {
			// Give the policy several rounds to (wrongly) switch back.
			for range 20 {
				f.Status()
				time.Sleep(10 * time.Millisecond)
			}
			if f.Active() != "b" || onB.Err() != nil {
				t.Fatalf("without failback: active %s, lease err %v", f.Active(), onB.Err())
			}
			continue
		}
		eventually(t, "the failback to a", func() bool { return f.Active() == "a" })
		<-onB.Done()
		back := must(t)(c.Lock(ctx, "k"))
		if !(l.Token() < onB.Token() && onB.Token() < back.Token()) || f.Epoch() != 2 {
			t.Fatalf("tokens %d, %d, %d over two switches (epoch %d): they must increase", l.Token(), onB.Token(), back.Token(), f.Epoch())
		}
		_ = back.Unlock(ctx)
	}
}

func TestWaiterMovesToNewEngine(t *testing.T) {
	fl := newFleet(t)
	c, f := fl.client(t, failover.Options{})
	ctx := ctxT(t)
	blocker := must(t)(fl.outA.Lock(ctx, "k")) // held on server a by someone else
	defer blocker.Unlock(ctx)
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "k")
		if err == nil {
			if freeOn(fl.outB, "k") {
				err = errors.New("granted, but not on engine b")
			}
			_ = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it wait on a; the assertion does not depend on it
	if err := f.SetActive("b"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter after the switch: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter stayed on the old engine")
	}
}

// TestFenceKeepsHoldersApart: with Fence, the first grant on the new engine
// comes no earlier than the moment the old engine's lease must have
// expired, so a holder that never learns of the switch cannot overlap.
func TestFenceKeepsHoldersApart(t *testing.T) {
	fl := newFleet(t)
	c, f := fl.client(t, failover.Options{Fence: true})
	ctx := ctxT(t)
	const ttl = 300 * time.Millisecond
	granted := time.Now()
	old := must(t)(c.Lock(ctx, "k", cerberus.WithTTL(ttl)))
	mustExpireBy := granted.Add(ttl) // the old holder may act until here
	if err := f.SetActive("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatalf("TryLock inside the fence: want ErrNotAcquired, got %v", err)
	}
	next := must(t)(c.Lock(ctx, "k"))
	if at := time.Now(); at.Before(mustExpireBy) {
		t.Fatalf("new holder granted %v before the old lease must have expired", mustExpireBy.Sub(at))
	}
	_ = next.Unlock(ctx)
	_ = old.Unlock(ctx)
}

func TestNewRefusesBadSetups(t *testing.T) {
	m := memory.New()
	defer m.Close()
	for _, tc := range []struct {
		engines []failover.NamedEngine
		opts    failover.Options
	}{
		{nil, failover.Options{}},
		{[]failover.NamedEngine{{Name: "", Engine: m}}, failover.Options{}},
		{[]failover.NamedEngine{{Name: "a", Engine: m}, {Name: "a", Engine: m}}, failover.Options{}},
		{[]failover.NamedEngine{{Name: "a"}}, failover.Options{}},
		{[]failover.NamedEngine{{Name: "a", Engine: m}}, failover.Options{Interval: -time.Second}},
		{[]failover.NamedEngine{{Name: "a", Engine: m}}, failover.Options{Epoch: 1 << 16}},
	} {
		if _, err := failover.New(tc.engines, tc.opts); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("New(%v, %+v): want ErrInvalidRequest, got %v", tc.engines, tc.opts, err)
		}
	}
}

func TestCloseEndsLeases(t *testing.T) {
	fl := newFleet(t)
	c, _ := fl.client(t, failover.Options{})
	l := must(t)(c.Lock(ctxT(t), "k"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if !errors.Is(l.Err(), cerberus.ErrClosed) {
		t.Fatalf("Err after Close = %v, want ErrClosed", l.Err())
	}
	if !freeOn(fl.outA, "k") {
		t.Fatal("Close left the key held on engine a")
	}
}

// TestConfigureAppliesWithoutRestart: a reload turns automatic failover on,
// flips the active engine, raises the epoch, and survives an unknown name.
func TestConfigureAppliesWithoutRestart(t *testing.T) {
	fl := newFleet(t)
	c, f := fl.client(t, failover.Options{Interval: 10 * time.Millisecond})
	ctx := ctxT(t)
	fl.a.down.Store(true)
	eventually(t, "a to be marked down", func() bool { return !f.Status()[0].Healthy })
	if f.Active() != "a" {
		t.Fatal("switched without Auto")
	}
	if err := f.Configure(failover.Options{Interval: 10 * time.Millisecond, Auto: true}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the switch once Auto is on", func() bool { return f.Active() == "b" })
	fl.a.down.Store(false)
	before := must(t)(c.Lock(ctx, "k"))
	_ = before.Unlock(ctx)
	if err := f.Configure(failover.Options{Interval: 10 * time.Millisecond, Epoch: 7}); err != nil {
		t.Fatal(err)
	}
	after := must(t)(c.Lock(ctx, "k"))
	if f.Epoch() != 7 || after.Token()>>48 != 7 || after.Token() <= before.Token() {
		t.Fatalf("epoch %d, tokens %d then %d: raising the epoch must raise tokens", f.Epoch(), before.Token(), after.Token())
	}
	_ = after.Unlock(ctx)
	if err := f.Configure(failover.Options{Epoch: 3}); err != nil || f.Epoch() != 7 {
		t.Fatalf("a lower epoch: %v, epoch %d; want it ignored", err, f.Epoch())
	}
	if err := f.Configure(failover.Options{Active: "a"}); err != nil || f.Active() != "a" {
		t.Fatalf("Active a: %v, active %s", err, f.Active())
	}
	if err := f.Configure(failover.Options{Active: "nope"}); !errors.Is(err, failover.ErrUnknownEngine) {
		t.Fatalf("unknown Active: %v", err)
	}
	if err := f.Configure(failover.Options{Interval: -time.Second}); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Fatalf("negative interval: %v", err)
	}
}

// TestFollowTakesTheFleetsEpoch: Follow switches to the fleet's engine at
// the fleet's epoch, never lowers an epoch, raises it without a switch
// when the engine is already active, and reports the reason it was given.
func TestFollowTakesTheFleetsEpoch(t *testing.T) {
	fl := newFleet(t)
	var reasons []string
	var mu sync.Mutex
	c, f := fl.client(t, failover.Options{OnSwitch: func(e failover.SwitchEvent) {
		mu.Lock()
		reasons = append(reasons, e.Reason)
		mu.Unlock()
	}})
	ctx := ctxT(t)
	held := must(t)(c.Lock(ctx, "k"))
	if err := f.Follow("b", 7, "failover"); err != nil {
		t.Fatal(err)
	}
	if f.Active() != "b" || f.Epoch() != 7 {
		t.Fatalf("after Follow(b, 7): active %s epoch %d", f.Active(), f.Epoch())
	}
	if !errors.Is(held.Err(), cerberus.ErrEngineSwitched) {
		t.Fatalf("the lease held across Follow: Err %v", held.Err())
	}
	l := must(t)(c.Lock(ctx, "k"))
	if l.Token()>>48 != 7 {
		t.Fatalf("token %x does not carry epoch 7", l.Token())
	}
	// Same engine, higher epoch: no switch, the lease stays, later tokens
	// carry the new epoch.
	if err := f.Follow("b", 9, "operator"); err != nil {
		t.Fatal(err)
	}
	if l.Err() != nil || f.Epoch() != 9 {
		t.Fatalf("Follow(b, 9) on b: lease err %v, epoch %d", l.Err(), f.Epoch())
	}
	_ = l.Unlock(ctx)
	// A lower epoch never takes tokens back.
	if err := f.Follow("a", 3, "failback"); err != nil {
		t.Fatal(err)
	}
	if f.Active() != "a" || f.Epoch() != 10 {
		t.Fatalf("after Follow(a, 3): active %s epoch %d, want a 10", f.Active(), f.Epoch())
	}
	if err := f.Follow("nope", 11, "operator"); !errors.Is(err, failover.ErrUnknownEngine) || f.Epoch() != 10 {
		t.Fatalf("Follow(nope): %v, epoch %d", err, f.Epoch())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reasons) != 2 || reasons[0] != "failover" || reasons[1] != "failback" {
		t.Fatalf("switch reasons %v, want [failover failback]", reasons)
	}
}

// TestMinFenceWithoutLocalLeases: a process that granted nothing on the
// old engine still fences for MinFence after a switch, since other
// processes' leases there are not its to see.
func TestMinFenceWithoutLocalLeases(t *testing.T) {
	fl := newFleet(t)
	const fence = 300 * time.Millisecond
	c, f := fl.client(t, failover.Options{Fence: true, MinFence: fence})
	ctx := ctxT(t)
	switched := time.Now()
	if err := f.Follow("b", 1, "failover"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatalf("TryLock inside the fence: want ErrNotAcquired, got %v", err)
	}
	l := must(t)(c.Lock(ctx, "k"))
	if at := time.Now(); at.Before(switched.Add(fence)) {
		t.Fatalf("granted %v after the switch, inside the %v fence", at.Sub(switched), fence)
	}
	_ = l.Unlock(ctx)
}

// TestPassiveDetection: with a 5s health interval, an outage that real
// traffic runs into is confirmed by quick probes and switched well inside
// one interval; one failed call on a healthy engine costs one ping and
// moves nothing.
func TestPassiveDetection(t *testing.T) {
	fl := newFleet(t)
	const interval = 5 * time.Second
	c, f := fl.client(t, failover.Options{Auto: true, Interval: interval, Threshold: 3})
	ctx := ctxT(t)
	eventually(t, "the first health round", func() bool { return fl.a.pings.Load() >= 1 })

	fl.a.failNext.Store(1)
	before := fl.a.pings.Load()
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("TryLock on a failing call: %v", err)
	}
	eventually(t, "the quick probe", func() bool { return fl.a.pings.Load() > before })
	time.Sleep(3 * failover.QuickProbeSpacing) // the probe has answered; no more pings may follow
	if n := fl.a.pings.Load() - before; n != 1 || f.Active() != "a" || f.Status()[0].Failures != 0 {
		t.Fatalf("one failed call on a healthy engine: %d pings, active %s, failures %d; want 1, a, 0", n, f.Active(), f.Status()[0].Failures)
	}

	fl.a.down.Store(true)
	start := time.Now()
	_, _ = c.TryLock(ctx, "k")
	eventually(t, "the switch", func() bool { return f.Active() == "b" })
	if took := time.Since(start); took >= interval/2 {
		t.Fatalf("the switch took %v after the first failed call, with a %v interval", took, interval)
	}
	if n := fl.a.pings.Load() - before; n != 1+3 {
		t.Errorf("%d pings, want 1 for the single failure and 3 (the threshold) to confirm the outage", n)
	}
}

// Unwrap lets the Manager find the memory engine's Inspector and Watcher.
func (f *flaky) Unwrap() engine.Engine { return f.Engine }

// exclusiveOnly wraps a real engine so that it reports
// Limits().ExclusiveOnly, as MySQL's session strategy does.
type exclusiveOnly struct{ engine.Engine }

func (e exclusiveOnly) Limits() engine.Limits {
	lim := e.Engine.Limits()
	lim.ExclusiveOnly = true
	return lim
}

// TestLimitsExclusiveOnly: a Manager with one exclusive-only engine is
// exclusive-only itself, so that a shared request valid now is not refused
// after a switch.
func TestLimitsExclusiveOnly(t *testing.T) {
	f, err := failover.New([]failover.NamedEngine{{Name: "a", Engine: memory.New()},
		{Name: "b", Engine: exclusiveOnly{memory.New()}}}, failover.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !f.Limits().ExclusiveOnly {
		t.Errorf("Limits().ExclusiveOnly = false with an exclusive-only engine in the list")
	}
}

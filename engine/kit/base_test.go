package kit

import (
	"context"
	"errors"
	"github.com/cerberus-go/cerberus/engine"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hang bounds waits for something that must happen; it is a guard against
// a hung test, not a speed limit.
const hang = 10 * time.Second

type testLease struct{ n int }

func TestBaseBeginOrder(t *testing.T) {
	var b Base[*testLease]
	invalid := errors.New("invalid")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	// Validation comes first, even on a closed engine with an ended ctx.
	if err := b.Begin(cancelled, invalid); err != invalid {
		t.Fatalf("Begin with a validation error: %v", err)
	}
	if err := b.Begin(cancelled, nil); !errors.Is(err, engine.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Begin with an ended ctx: %v, want ErrNotAcquired joined with context.Canceled", err)
	}
	if err := b.Begin(context.Background(), nil); err != nil {
		t.Fatalf("Begin on an open engine: %v", err)
	}
	if _, first := b.Shut(); !first {
		t.Fatal("the first Shut reported that Close had already begun")
	}
	if err := b.Begin(cancelled, nil); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Begin after Shut with an ended ctx: %v, want ErrClosed before the ctx check", err)
	}
	if err := b.Begin(cancelled, invalid); err != invalid {
		t.Fatalf("Begin after Shut with a validation error: %v", err)
	}
	if err := b.Enter(context.Background(), nil); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Enter after Shut: %v, want ErrClosed", err)
	}
}

func TestBaseEnterWaitCalls(t *testing.T) {
	var b Base[*testLease]
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Enter(cancelled, nil); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("Enter with an ended ctx: %v", err)
	}
	// That call did not stay registered: with none entered, WaitCalls
	// returns at once.
	if !b.WaitCallsUpTo(hang) {
		t.Fatal("a refused Enter left a call registered")
	}
	if err := b.Enter(context.Background(), nil); err != nil {
		t.Fatalf("Enter: %v", err)
	}
	b.Shut()
	if b.WaitCallsUpTo(20 * time.Millisecond) {
		t.Fatal("WaitCallsUpTo reported done while a call was still in")
	}
	waited := make(chan struct{})
	go func() { b.WaitCalls(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("WaitCalls returned while a call was still in")
	case <-time.After(20 * time.Millisecond):
	}
	b.Exit()
	select {
	case <-waited:
	case <-time.After(hang):
		t.Fatal("WaitCalls did not return after the call exited")
	}
}

func TestBaseRegistry(t *testing.T) {
	var mu sync.Mutex
	var b Base[*testLease]
	b.Init(&mu)
	l1, l2, l3 := &testLease{1}, &testLease{2}, &testLease{3}
	if err := b.Track(l1, nil); err != nil {
		t.Fatalf("Track: %v", err)
	}
	checked := false
	if err := b.Track(l2, func() error {
		// check runs with the engine's mutex held.
		if mu.TryLock() {
			mu.Unlock()
			t.Error("check ran without the mutex held")
		}
		checked = true
		return nil
	}); err != nil || !checked {
		t.Fatalf("Track with a check: %v (check ran: %t)", err, checked)
	}
	lost := errors.New("session lost")
	if err := b.Track(l3, func() error { return lost }); err != lost {
		t.Fatalf("Track with a failing check: %v, want its error", err)
	}
	mu.Lock()
	var all []int
	for l := range b.AllLocked() {
		all = append(all, l.n)
	}
	closed := b.ClosedLocked()
	mu.Unlock()
	slices.Sort(all)
	if !slices.Equal(all, []int{1, 2}) || closed {
		t.Fatalf("registry holds %v (closed %t), want [1 2] (open)", all, closed)
	}
	if !b.Forget(l1) {
		t.Fatal("Forget of a tracked lease reported false")
	}
	if b.Forget(l1) {
		t.Fatal("a second Forget of the same lease reported true")
	}
	held, first := b.Shut()
	if !first || len(held) != 1 || held[0] != l2 {
		t.Fatalf("Shut returned %v, %t; want [l2], true", held, first)
	}
	if b.Forget(l2) {
		t.Fatal("Forget after Shut reported true: Close and the lease would both end it")
	}
	if err := b.Track(l3, func() error { t.Error("check ran after Shut"); return nil }); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Track after Shut: %v, want ErrClosed", err)
	}
	if held, first := b.Shut(); first || held != nil {
		t.Fatalf("a second Shut returned %v, %t; want nothing, false", held, first)
	}
	if !b.Closed() {
		t.Fatal("Closed is false after Shut")
	}
}

func TestBaseTakeLocked(t *testing.T) {
	var b Base[*testLease]
	for i := range 3 {
		if err := b.Track(&testLease{i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	b.lock()
	taken := b.TakeLocked()
	b.mu.Unlock()
	if len(taken) != 3 {
		t.Fatalf("TakeLocked returned %d leases, want 3", len(taken))
	}
	if b.Forget(taken[0]) {
		t.Fatal("a taken lease is still tracked")
	}
	// The engine stays open: new leases are tracked.
	if err := b.Track(&testLease{9}, nil); err != nil {
		t.Fatalf("Track after TakeLocked: %v", err)
	}
}

func TestBaseClosingAndBind(t *testing.T) {
	var b Base[*testLease]
	select {
	case <-b.Closing():
		t.Fatal("Closing is closed before Shut")
	default:
	}
	caller, cancelCaller := context.WithCancel(context.Background())
	ended, stop := b.Bind(caller)
	defer stop()
	cancelCaller()
	<-ended.Done()
	if cause := context.Cause(ended); !errors.Is(cause, context.Canceled) || errors.Is(cause, engine.ErrClosed) {
		t.Fatalf("a context bound to a cancelled caller has cause %v, want context.Canceled", cause)
	}

	bound, stopBound := b.Bind(context.Background())
	defer stopBound()
	b.Shut()
	select {
	case <-b.Closing():
	default:
		t.Fatal("Closing is open after Shut")
	}
	select {
	case <-bound.Done():
	case <-time.After(hang):
		t.Fatal("a bound context did not end at Shut")
	}
	if cause := context.Cause(bound); !errors.Is(cause, engine.ErrClosed) {
		t.Fatalf("a bound context ended by Shut has cause %v, want ErrClosed", cause)
	}
	if cause := context.Cause(b.Context()); !errors.Is(cause, engine.ErrClosed) {
		t.Fatalf("Context's cause after Shut is %v, want ErrClosed", cause)
	}
}

func TestBaseGo(t *testing.T) {
	var b Base[*testLease]
	release := make(chan struct{})
	var ran atomic.Int32
	if !b.Go(func() { <-release; ran.Add(1) }) {
		t.Fatal("Go refused on an open engine")
	}
	b.Shut()
	if b.Go(func() { ran.Add(10) }) {
		t.Fatal("Go ran a function after Shut")
	}
	if b.WaitUpTo(20 * time.Millisecond) {
		t.Fatal("WaitUpTo reported done while a goroutine from Go was running")
	}
	close(release)
	if !b.WaitUpTo(hang) {
		t.Fatal("WaitUpTo did not see the goroutine from Go finish")
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("ran = %d, want 1: the Go before Shut only", n)
	}
	// Run after Wait still runs, on the caller's goroutine.
	b.Run(func() { ran.Add(100) })
	if n := ran.Load(); n != 101 {
		t.Fatalf("ran = %d after a Run following Wait, want 101", n)
	}
}

func TestReleaseAll(t *testing.T) {
	held := []*testLease{{1}, {2}, {3}}
	var mu sync.Mutex
	var released []int
	started := make(chan struct{}, len(held))
	gate := make(chan struct{})
	go func() {
		// Every release is in flight before any returns: they run at once.
		for range held {
			<-started
		}
		close(gate)
	}()
	ReleaseAll(held, hang, func(ctx context.Context, l *testLease) {
		started <- struct{}{}
		<-gate
		if _, ok := ctx.Deadline(); !ok {
			t.Error("release got a context without a deadline")
		}
		mu.Lock()
		released = append(released, l.n)
		mu.Unlock()
	})
	slices.Sort(released)
	if !slices.Equal(released, []int{1, 2, 3}) {
		t.Fatalf("released %v, want [1 2 3]", released)
	}

	// The context ends after d, so a release that waits on it is bounded.
	start := time.Now()
	var err error
	ReleaseAll(held[:1], 30*time.Millisecond, func(ctx context.Context, _ *testLease) {
		<-ctx.Done()
		err = ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > hang {
		t.Fatalf("a release waiting on its context ended with %v", err)
	}
	ReleaseAll(nil, time.Nanosecond, func(context.Context, *testLease) { t.Error("release of no lease") })
}

func TestSignalNotHeld(t *testing.T) {
	var lost error
	s := NewSignal(func(err error) { lost = err })
	err := s.NotHeld("k")
	if !errors.Is(err, engine.ErrNotHeld) || !errors.Is(err, engine.ErrLeaseLost) || !errors.Is(s.Err(), engine.ErrLeaseLost) {
		t.Fatalf("NotHeld on an open signal: %v (signal: %v)", err, s.Err())
	}
	if !errors.Is(lost, engine.ErrLeaseLost) || !s.Closed() {
		t.Fatalf("NotHeld did not close the signal through OnLost: %v", lost)
	}
	if want := `cerberus: lock not held: "k" (lease ended: cerberus: lease lost)`; err.Error() != want {
		t.Fatalf("NotHeld says %q, want %q", err, want)
	}

	// An ended signal keeps its reason.
	s = NewSignal(nil)
	s.Close(engine.ErrReleased)
	if err := s.NotHeld("k"); !errors.Is(err, engine.ErrNotHeld) || !errors.Is(err, engine.ErrReleased) ||
		errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("NotHeld on a released signal: %v", err)
	}
}

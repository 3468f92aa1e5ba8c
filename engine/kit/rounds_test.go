package kit

import (
	"context"
	"errors"
	"github.com/cerberus-go/cerberus/engine"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPace: the refusal follows the leases' remaining validity, not the
// length of a round against its interval.
func TestPace(t *testing.T) {
	var p Pace
	if err := p.Err(); err != nil {
		t.Fatalf("a new Pace: %v", err)
	}
	slack := func(want time.Duration, wantOK bool) {
		t.Helper()
		if got, ok := p.Slack(); got != want || ok != wantOK {
			t.Fatalf("Slack() = %v, %v; want %v, %v", got, ok, want, wantOK)
		}
	}
	slack(0, false)
	s := time.Now() // a round's start
	ttl := time.Second
	life := ttl - engine.Margin(ttl) // 900ms
	// A 1s lease renewed in a round of 400ms against an interval of
	// 333ms: the next round starts at once and lands 800ms after s, 100ms
	// before the validity this round gave (s+900ms) ends.
	p.Record(1, 400*time.Millisecond, s.Add(400*time.Millisecond), s.Add(life))
	if err := p.Err(); err != nil {
		t.Fatalf("after a slow round that leaves the lease 100ms of slack: %v", err)
	}
	slack(100*time.Millisecond, true)
	// The round of the issue: 567ms. The next one, as slow, would land at
	// s+1134ms, after the validity ends.
	p.Record(1, 567*time.Millisecond, s.Add(567*time.Millisecond), s.Add(life))
	err := p.Err()
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "renewal is falling behind") {
		t.Fatalf("after a round that leaves a lease at risk: %v, want ErrUnavailable, falling behind", err)
	}
	slack(-234*time.Millisecond, true)
	p.Record(1, 50*time.Millisecond, s.Add(333*time.Millisecond), s.Add(life))
	if err := p.Err(); err != nil {
		t.Fatalf("after a round that landed with slack: %v", err)
	}
	// A quick round (under its interval) that leaves a lease whose
	// renewal failed 400ms of validity, less than the next round needs.
	p.Record(2, 100*time.Millisecond, s.Add(333*time.Millisecond), s.Add(400*time.Millisecond))
	if err := p.Err(); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("after a quick round that leaves a lease at risk: %v, want ErrUnavailable", err)
	}
	p.Record(0, 100*time.Millisecond, s.Add(333*time.Millisecond), time.Time{})
	if err := p.Err(); err != nil {
		t.Fatalf("after a round with no lease left: %v", err)
	}
	slack(0, false)
	p.Unanswered(3, 200*time.Millisecond)
	if err := p.Err(); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("after a round with an unanswered renewal: %v, want ErrUnavailable", err)
	}
	slack(0, true)
}

// TestInBatches: every item of every set is passed once, in batches of at
// most size, with at most parallel calls at a time, each batch from one set.
func TestInBatches(t *testing.T) {
	sets := [][]int{make([]int, 23), make([]int, 5), nil}
	for s := range sets {
		for i := range sets[s] {
			sets[s][i] = s*1000 + i
		}
	}
	var mu sync.Mutex
	seen := map[int]int{}
	var now, most atomic.Int32
	InBatches(4, 2, sets, func(set int, batch []int) {
		if n := now.Add(1); n > most.Load() {
			most.Store(n)
		}
		defer now.Add(-1)
		time.Sleep(5 * time.Millisecond)
		if len(batch) == 0 || len(batch) > 4 {
			t.Errorf("batch of %d items, want 1 to 4", len(batch))
		}
		mu.Lock()
		defer mu.Unlock()
		for _, x := range batch {
			if x/1000 != set {
				t.Errorf("item %d in a batch of set %d", x, set)
			}
			seen[x]++
		}
	})
	if len(seen) != 28 {
		t.Errorf("%d distinct items passed, want 28", len(seen))
	}
	for x, n := range seen {
		if n != 1 {
			t.Errorf("item %d passed %d times", x, n)
		}
	}
	if most.Load() > 2 {
		t.Errorf("%d calls at once, want at most 2", most.Load())
	}
}

func TestBackoffPause(t *testing.T) {
	b := Backoff{Min: time.Millisecond, Max: 8 * time.Millisecond}
	ctx := context.Background()
	d, err := b.Pause(ctx, nil, nil, 4*time.Millisecond)
	if err != nil || d != 8*time.Millisecond {
		t.Errorf("Pause(4ms) = %v, %v; want 8ms (doubled)", d, err)
	}
	if d, _ := b.Pause(ctx, nil, nil, 8*time.Millisecond); d != 8*time.Millisecond {
		t.Errorf("Pause(8ms) = %v, want Max", d)
	}
	kick := make(chan struct{}, 1)
	kick <- struct{}{}
	if d, err := b.Pause(ctx, nil, kick, time.Hour); err != nil || d != 2*time.Millisecond {
		t.Errorf("a kicked Pause = %v, %v; want 2 x Min at once", d, err)
	}
	closing := make(chan struct{})
	close(closing)
	if _, err := b.Pause(ctx, closing, nil, time.Hour); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Pause on a closing engine: %v, want ErrClosed", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Pause(cctx, nil, nil, time.Hour); !errors.Is(err, engine.ErrNotAcquired) ||
		!errors.Is(err, context.Canceled) {
		t.Errorf("Pause with an ended ctx: %v, want ErrNotAcquired and context.Canceled", err)
	}
}

// TestRenewRounds: no rounds while the interval is 0; a kick starts them;
// rounds follow the interval; a round that leaves too little validity for
// the next one is recorded in the pace, until a round leaves slack or
// nothing is left to renew; the loop returns when closing closes.
func TestRenewRounds(t *testing.T) {
	var every atomic.Int64 // nanoseconds; 0: nothing to renew
	var rounds atomic.Int32
	var slow atomic.Bool
	var pace Pace
	closing, kick, done := make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(done)
		interval := func() (time.Duration, time.Time) { return time.Duration(every.Load()), time.Time{} }
		RenewRounds(closing, kick, interval, func() (int, time.Time) {
			rounds.Add(1)
			if slow.Load() {
				time.Sleep(30 * time.Millisecond)
			}
			// Valid 20ms after the round: enough for the next round, due
			// 10ms after this one began, unless this one took 30ms.
			return 3, time.Now().Add(20 * time.Millisecond)
		}, &pace)
	}()
	time.Sleep(50 * time.Millisecond)
	if n := rounds.Load(); n != 0 {
		t.Fatalf("%d rounds with nothing to renew", n)
	}
	every.Store(int64(10 * time.Millisecond))
	kick <- struct{}{}
	waitFor(t, "five rounds after the kick", func() bool { return rounds.Load() >= 5 })
	slow.Store(true)
	waitFor(t, "the pace to record a slow round", func() bool { return pace.Err() != nil })
	slow.Store(false)
	waitFor(t, "the pace to recover", func() bool { return pace.Err() == nil })
	slow.Store(true)
	waitFor(t, "the pace to record a slow round", func() bool { return pace.Err() != nil })
	every.Store(0) // the leases at risk ended: nothing is left to renew
	waitFor(t, "the pace to clear once nothing is renewed", func() bool {
		_, ok := pace.Slack()
		return pace.Err() == nil && !ok
	})
	slow.Store(false)
	every.Store(int64(10 * time.Millisecond))
	kick <- struct{}{}
	waitFor(t, "the slack of a new round", func() bool { s, ok := pace.Slack(); return ok && s > 0 })
	close(closing)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("RenewRounds did not return after closing")
	}
}

// TestRenewRoundsFromValidity: the first round after a quiet spell comes
// the interval after the validity of the lease that woke the loop began,
// not the interval after the loop woke: a lease whose grant took the
// whole interval to answer is renewed at once. The round came an hour
// late before.
func TestRenewRoundsFromValidity(t *testing.T) {
	const every = time.Hour
	var since atomic.Pointer[time.Time] // nil: nothing to renew
	var pace Pace
	closing, kick, done := make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
	rounds := make(chan struct{}, 1)
	go func() {
		defer close(done)
		RenewRounds(closing, kick, func() (time.Duration, time.Time) {
			if s := since.Load(); s != nil {
				return every, *s
			}
			return 0, time.Time{}
		}, func() (int, time.Time) {
			select {
			case rounds <- struct{}{}:
			default:
			}
			return 1, time.Now().Add(every)
		}, &pace)
	}()
	granted := time.Now().Add(-every) // a grant that took the whole interval
	since.Store(&granted)
	kick <- struct{}{}
	select {
	case <-rounds:
	case <-time.After(10 * time.Second):
		t.Errorf("no round within 10s for a lease whose renewal was due when it woke the loop")
	}
	close(closing)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("RenewRounds did not return after closing")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

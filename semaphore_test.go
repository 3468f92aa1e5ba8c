package cerberus_test

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
)

// TestSemaphoreNeverAboveN has 4 clients (engines on one store, as
// processes on one server) take permits of a 3-permit semaphore: never
// more than 3 at once, all 3 used, every token new, and waiters served
// fairly.
func TestSemaphoreNeverAboveN(t *testing.T) {
	store := memory.NewStore()
	const n, clients, workers, rounds = 3, 4, 4, 50
	var inside, most, over atomic.Int64
	var mu sync.Mutex
	tokens := make(map[uint64]bool)
	counts := make([]int, clients*workers)
	var wg sync.WaitGroup
	for c := range clients {
		cl, err := cerberus.New(memory.New(memory.WithStore(store)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		sem := cl.Semaphore("workers", n)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					l, err := sem.Acquire(ctx)
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
					k := inside.Add(1)
					if k > n {
						over.Add(1)
					}
					for m := most.Load(); k > m && !most.CompareAndSwap(m, k); m = most.Load() {
					}
					mu.Lock()
					if tokens[l.Token()] {
						t.Errorf("token %d granted twice", l.Token())
					}
					tokens[l.Token()] = true
					counts[c*workers+w]++
					mu.Unlock()
					time.Sleep(200 * time.Microsecond)
					inside.Add(-1)
					if err := l.Unlock(context.Background()); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if over.Load() > 0 {
		t.Errorf("%d grants found more than %d permits held", over.Load(), n)
	}
	if most.Load() != n {
		t.Errorf("at most %d permits were held at once, want %d", most.Load(), n)
	}
	for i, c := range counts {
		if c != rounds {
			t.Errorf("worker %d took %d permits, want %d", i, c, rounds)
		}
	}
}

// TestSemaphoreTryAndInUse: TryAcquire is refused when every permit is
// held and granted once one is given back; InUse counts.
func TestSemaphoreTryAndInUse(t *testing.T) {
	c, err := cerberus.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	sem := c.Semaphore("pool", 2)
	a, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := sem.InUse(ctx); err != nil || n != 2 {
		t.Fatalf("InUse = %d, %v; want 2", n, err)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatalf("third TryAcquire of 2 permits: %v, want ErrNotAcquired", err)
	}
	// A lock of the same name is another key.
	l, err := c.TryLock(ctx, "pool")
	if err != nil {
		t.Fatalf("a lock named like a semaphore: %v", err)
	}
	_ = l.Unlock(ctx)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	cc, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after a permit came back: %v", err)
	}
	if cc.Token() <= b.Token() {
		t.Errorf("token %d is not above the previous permit's %d", cc.Token(), b.Token())
	}
	_ = b.Unlock(ctx)
	_ = cc.Unlock(ctx)
	if n, err := sem.InUse(ctx); err != nil || n != 0 {
		t.Fatalf("InUse after every permit came back = %d, %v; want 0", n, err)
	}
}

// uncounted hides the memory engine's counted mode, as an engine without
// one would be.
type uncounted struct{ engine.Engine }

func (u uncounted) Limits() engine.Limits { l := u.Engine.Limits(); l.Counted = false; return l }
func (u uncounted) Validate(req engine.Request) error {
	return engine.CheckRequest(req, u.Limits())
}
func (u uncounted) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := u.Validate(req); err != nil {
		return nil, err
	}
	return u.Engine.Acquire(ctx, req)
}

// TestSemaphoreBadInput: sizes out of range, an empty name, a bad TTL and
// an engine that cannot count are refused before any I/O, and nothing is
// held afterwards.
func TestSemaphoreBadInput(t *testing.T) {
	c, err := cerberus.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		sem  *cerberus.Semaphore
		opts []cerberus.Option
		want error
	}{
		{c.Semaphore("s", 0), nil, cerberus.ErrInvalidRequest},
		{c.Semaphore("s", -1), nil, cerberus.ErrInvalidRequest},
		{c.Semaphore("s", engine.MaxLimit+1), nil, cerberus.ErrInvalidRequest},
		{c.Semaphore("", 2), nil, cerberus.ErrInvalidKey},
		{c.Semaphore("s", 2), []cerberus.Option{cerberus.WithTTL(time.Hour * 1000)}, cerberus.ErrInvalidTTL},
	} {
		if _, err := tc.sem.Acquire(ctx, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("Acquire of %q/%d: %v, want %v", tc.sem.Name(), tc.sem.Size(), err, tc.want)
		}
		if _, err := tc.sem.InUse(ctx); tc.want != cerberus.ErrInvalidTTL && !errors.Is(err, tc.want) {
			t.Errorf("InUse of %q/%d: %v, want %v", tc.sem.Name(), tc.sem.Size(), err, tc.want)
		}
	}
	if n, err := c.Semaphore("s", 2).InUse(ctx); err != nil || n != 0 {
		t.Errorf("InUse after refused calls = %d, %v; want 0", n, err)
	}
	plain, err := cerberus.New(uncounted{memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_, err = plain.Semaphore("s", 2).Acquire(ctx)
	if !errors.Is(err, cerberus.ErrInvalidRequest) {
		t.Errorf("Acquire on an engine that cannot count: %v, want ErrInvalidRequest", err)
	}
	if _, err := plain.Semaphore("s", 2).InUse(ctx); !errors.Is(err, cerberus.ErrInvalidRequest) {
		t.Errorf("InUse on an engine that cannot list holders: %v, want ErrInvalidRequest", err)
	}
}

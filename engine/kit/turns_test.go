package kit

import (
	"context"
	"errors"
	"github.com/cerberus-go/cerberus/engine"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestTurnsOneAtATime: of many waiters on one key, one holds the turn at a
// time, every one gets it, and the table is empty afterwards.
func TestTurnsOneAtATime(t *testing.T) {
	var turns Turns
	var inside, most, served atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, done, err := turns.Take(context.Background(), "k", nil)
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			inside.Add(-1)
			served.Add(1)
			done()
		}()
	}
	wg.Wait()
	if most.Load() != 1 || served.Load() != 50 {
		t.Fatalf("at most %d had the turn at once (want 1); %d of 50 served", most.Load(), served.Load())
	}
	if len(turns.m) != 0 {
		t.Fatalf("%d keys left in the table", len(turns.m))
	}
}

// TestTurnsCancelAndKick: a queued waiter leaves on ctx or stop; Kick
// reaches the holder of the turn only.
func TestTurnsCancelAndKick(t *testing.T) {
	var turns Turns
	kick, done, err := turns.Take(context.Background(), "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := turns.Take(ctx, "k", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued Take past its deadline: %v", err)
	}
	stop := make(chan struct{})
	close(stop)
	if _, _, err := turns.Take(context.Background(), "k", stop); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("queued Take after stop: %v", err)
	}
	turns.Kick("other")
	select {
	case <-kick:
		t.Fatal("a kick for another key reached this turn")
	default:
	}
	turns.Kick("k")
	select {
	case <-kick:
	default:
		t.Fatal("Kick did not reach the holder of the turn")
	}
	done()
	if len(turns.m) != 0 {
		t.Fatalf("%d keys left in the table", len(turns.m))
	}
}

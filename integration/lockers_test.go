package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
)

// lockers are goroutines that lock and unlock keys of a run on a Client
// with a failover.Manager behind it, as a busy service would, counting what the
// failover tests check.
type lockers struct {
	grants, overran atomic.Int64
	killedAt        atomic.Int64 // unix ns of the kill; 0 before
	firstOnSecond   atomic.Int64 // unix ns of the first grant by the second engine after the kill

	mu   sync.Mutex
	held map[*cerberus.Lease]bool
	stop chan struct{}
	wg   sync.WaitGroup
}

// startLockers starts n lockers on keys run/0 .. run/keys-1, each Lock
// bounded by callTimeout, each lease held for a millisecond.
func startLockers(c *cerberus.Client, n, keys int, run string, callTimeout time.Duration) *lockers {
	ls := &lockers{held: map[*cerberus.Lease]bool{}, stop: make(chan struct{})}
	for i := range n {
		ls.wg.Add(1)
		go func() {
			defer ls.wg.Done()
			for range 10000 {
				select {
				case <-ls.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				start := time.Now()
				l, err := c.Lock(ctx, fmt.Sprintf("%s/%d", run, i%keys))
				if time.Since(start) > callTimeout+time.Second {
					ls.overran.Add(1)
				}
				cancel()
				if err != nil {
					continue
				}
				ls.grants.Add(1)
				if l.Token()>>48 >= 1 && ls.killedAt.Load() != 0 { // granted by the second engine
					ls.firstOnSecond.CompareAndSwap(0, time.Now().UnixNano())
				}
				ls.mu.Lock()
				ls.held[l] = true
				ls.mu.Unlock()
				time.Sleep(time.Millisecond)
				ls.mu.Lock()
				delete(ls.held, l)
				ls.mu.Unlock()
				_ = l.Unlock(context.Background())
			}
		}()
	}
	return ls
}

// kill runs kill with no lease changing hands meanwhile, notes the time,
// and returns the leases held at that moment.
func (ls *lockers) kill(kill func()) []*cerberus.Lease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var held []*cerberus.Lease
	for l := range ls.held {
		held = append(held, l)
	}
	ls.killedAt.Store(time.Now().UnixNano())
	kill()
	return held
}

// stopAll stops the lockers and waits for them.
func (ls *lockers) stopAll() {
	close(ls.stop)
	ls.wg.Wait()
}

// mustAllEnd fails t unless every lease of held ends within limit, and
// ends switched, lost or released.
func mustAllEnd(t *testing.T, held []*cerberus.Lease, limit time.Duration) {
	t.Helper()
	for _, l := range held {
		select {
		case <-l.Done():
		case <-time.After(limit):
			t.Fatalf("a lease held at the kill never ended")
		}
		if err := l.Err(); !errors.Is(err, engine.ErrEngineSwitched) && !errors.Is(err, engine.ErrLeaseLost) &&
			!errors.Is(err, engine.ErrReleased) {
			t.Errorf("lease held at the kill ended with %v", err)
		}
	}
}

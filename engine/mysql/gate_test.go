package mysql

import (
	"sync"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// TestLocalWaitersPollOnce: many waiters of one engine on one held key send
// one poller's worth of attempts, not one each, and are all granted in turn
// once the holder releases.
func TestLocalWaitersPollOnce(t *testing.T) {
	e, rec, dsn, table := recordingEngine(t)
	other, err := Open(dsn, WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })

	req := engine.Request{Key: "gate/hot", TTL: 10 * time.Second, Renew: true, Wait: true}
	holder, err := other.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 40
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := e.Acquire(hangCtx(t), req)
			if err == nil {
				err = l.Release(hangCtx(t))
			}
			errs <- err
		}()
	}
	const hold = 1500 * time.Millisecond
	time.Sleep(hold) // the waiters poll for this long; the count below is the assertion
	polled := rec.grantCount()
	if err := holder.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Each waiter's first attempt, plus one poller backing off from 5ms to
	// 200ms over the hold (about a dozen polls), with room to spare. Forty
	// independent pollers would send several hundred.
	if limit := waiters + 40; polled > limit {
		t.Fatalf("%d waiters sent %d grant attempts in %v; one poller per key allows about %d", waiters, polled, hold, limit)
	}
	t.Logf("%d waiters sent %d grant attempts while the key was held for %v", waiters, polled, hold)
}

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// deadlineBound is how long after its context's deadline a blocking call
// may return: the clean-up wait of an ended acquisition (kit.UndoWait)
// plus room for the scheduler of a loaded machine.
const deadlineBound = kit.UndoWait + 250*time.Millisecond

// overrun is one call and how long after its deadline it returned (0 if
// on time).
type overrun struct {
	op   string
	over time.Duration
	err  error
}

// deadlineLoad runs goroutines that lock, campaign and take permits (if
// the engine counts) on two contended keys, and try locks on free keys,
// each call with a deadline drawn from [minD, maxD), until stop, at most
// ops calls each, and returns how far each call returned past its
// deadline. A lease obtained is given back at once.
func deadlineLoad(c *cerberus.Client, prefix string, goroutines, ops int, minD, maxD time.Duration,
	stop time.Time) []overrun {
	kinds := []string{"lock", "campaign", "trylock"}
	if c.Engine().Limits().Counted {
		kinds = append(kinds, "semaphore")
	}
	var mu sync.Mutex
	var out []overrun
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < ops && time.Now().Before(stop); n++ {
				op := kinds[(g+n)%len(kinds)]
				key := fmt.Sprintf("%s/%d", prefix, rand.IntN(2))
				if op == "trylock" {
					// A key of its own, free: the grant is answered, and
					// what follows it may meet the deadline.
					key = fmt.Sprintf("%s/free-%d-%d", prefix, g, n)
				}
				o, l := deadlineCall(c, op, key, minD+rand.N(maxD-minD))
				mu.Lock()
				out = append(out, o)
				mu.Unlock()
				if l != nil {
					uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = l.Unlock(uctx)
					ucancel()
				} else {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// deadlineCall makes one call of kind op on key with a context of d.
func deadlineCall(c *cerberus.Client, op, key string, d time.Duration) (overrun, *cerberus.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	dl, _ := ctx.Deadline()
	var l *cerberus.Lease
	var err error
	switch op {
	case "lock":
		l, err = c.Lock(ctx, key, cerberus.WithWatchdog(time.Second))
	case "campaign":
		l, err = c.Election(key).Campaign(ctx, "v", cerberus.WithWatchdog(time.Second))
	case "semaphore":
		l, err = c.Semaphore(key, 2).Acquire(ctx, cerberus.WithTTL(time.Second))
	default:
		l, err = c.TryLock(ctx, key, cerberus.WithTTL(time.Second))
	}
	return overrun{op: op, over: max(time.Since(dl), 0), err: err}, l
}

// checkOverruns fails the test for every call that returned more than
// deadlineBound after its deadline, and logs the distribution.
func checkOverruns(t *testing.T, phase string, calls []overrun) {
	t.Helper()
	if len(calls) == 0 {
		t.Fatalf("%s: no call made", phase)
	}
	sort.Slice(calls, func(i, j int) bool { return calls[i].over < calls[j].over })
	late := 0
	for _, c := range calls {
		if c.over > deadlineBound {
			late++
			if late <= 3 {
				t.Errorf("%s: %s returned %v after its deadline (bound %v): %v", phase, c.op,
					c.over.Round(time.Millisecond), deadlineBound, c.err)
			}
		}
	}
	t.Logf("%s: %d calls, %d past the bound; past the deadline: median %v, p99 %v, max %v", phase,
		len(calls), late, calls[len(calls)/2].over.Round(time.Millisecond),
		calls[len(calls)*99/100].over.Round(time.Millisecond), calls[len(calls)-1].over.Round(time.Millisecond))
}

// deadlinePhases loads c without a fault, then through px's latency of
// 250ms±100ms each way (the checker's), then 400ms each way, then with
// connection resets, with a blackhole (nothing forwarded), and with the
// server stopped, checking every call against its deadline. The
// clients' op timeout is a second, as in the checker.
func deadlinePhases(t *testing.T, c *cerberus.Client, px *faultProxy, srv pausable) {
	prefix := unique(t, "deadline")
	checkOverruns(t, "no fault", deadlineLoad(c, prefix, 8, 20, 50*time.Millisecond, 600*time.Millisecond,
		time.Now().Add(time.Second)))
	undo := px.toxic(t, "latency", map[string]any{"latency": 250, "jitter": 100})
	checkOverruns(t, "latency 250ms±100ms", deadlineLoad(c, prefix, 12, 200, 50*time.Millisecond,
		1500*time.Millisecond, time.Now().Add(4*time.Second)))
	undo()
	// A round trip of 800ms: under the op timeout, so that a grant
	// answered near the deadline is followed by statements that are
	// answered too, a round trip later.
	undo = px.toxic(t, "latency", map[string]any{"latency": 400})
	checkOverruns(t, "latency 400ms", deadlineLoad(c, prefix, 12, 200, 500*time.Millisecond,
		2500*time.Millisecond, time.Now().Add(5*time.Second)))
	undo()
	for _, f := range []struct {
		name string
		kind string
	}{{"connection resets", "reset_peer"}, {"blackhole", "timeout"}} {
		undo = px.toxic(t, f.kind, map[string]any{"timeout": 0})
		calls := deadlineLoad(c, prefix, 12, 200, 50*time.Millisecond, 1500*time.Millisecond,
			time.Now().Add(2*time.Second))
		undo()
		checkOverruns(t, f.name, calls)
	}
	srv.Pause()
	calls := deadlineLoad(c, prefix, 12, 200, 50*time.Millisecond, 600*time.Millisecond,
		time.Now().Add(2*time.Second))
	srv.Resume()
	checkOverruns(t, "server stopped", calls)
}

// deadlineClient is a Client over the checker worker's engine named by
// strategy on dsn.
func deadlineClient(t *testing.T, strategy, dsn, table string) *cerberus.Client {
	t.Helper()
	e, err := dialEngine(workerSpec{Engine: strategy, Addrs: []string{dsn}, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestPostgresDeadlines: every Lock, Campaign, semaphore Acquire and
// TryLock of either strategy on a private PostgreSQL behind a fault proxy
// returns within deadlineBound of its context's deadline, under latency
// (also while the lease strategy's renewal refuses new leases) and with
// the server stopped.
func TestPostgresDeadlines(t *testing.T) {
	srv, px, dsn, table := startPostgresTarget(t)
	for _, strategy := range []string{"postgres-lease", "postgres"} {
		t.Run(strategy, func(t *testing.T) {
			deadlinePhases(t, deadlineClient(t, strategy, dsn, table), px, srv)
		})
	}
}

// TestMySQLDeadlines is TestPostgresDeadlines on a private MariaDB, for
// the lease, row and session strategies.
func TestMySQLDeadlines(t *testing.T) {
	srv, px, dsn, table := startMySQLTarget(t)
	for _, strategy := range []string{"mysql", "mysql-row", "mysql-session"} {
		t.Run(strategy, func(t *testing.T) {
			deadlinePhases(t, deadlineClient(t, strategy, dsn, table), px, srv)
		})
	}
}

package enginetest

import (
	"context"
	"errors"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// Retry bounds the grants of an engine's token tests (DESIGN.md's contract
// 5) across a server's restart, a leader's election or a client's restart:
// while the engine reports the server unavailable, or an attempt runs out
// of its time, the grant is tried again.
type Retry struct {
	// Within bounds all the attempts of one grant, and each release.
	Within time.Duration
	// Attempt bounds one attempt.
	Attempt time.Duration
	// Pause is the time between attempts.
	Pause time.Duration
}

// Grant acquires req on e, trying again as r says, and fails t if no grant
// came.
func (r Retry) Grant(t T, e engine.Engine, req engine.Request) engine.Lease {
	t.Helper()
	var err error
	for deadline := time.Now().Add(r.Within); time.Now().Before(deadline); time.Sleep(r.Pause) {
		var l engine.Lease
		ctx, cancel := context.WithTimeout(context.Background(), r.Attempt)
		l, err = e.Acquire(ctx, req)
		cancel()
		if err == nil {
			return l
		}
		if !errors.Is(err, engine.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			break
		}
	}
	t.Fatalf("acquire %s: %v", req.Key, err)
	return nil
}

// Cycles grants req on e n times with Grant (every third grant Shared,
// unless the engine grants exclusive leases only, the others Exclusive),
// releasing each lease, and returns the largest token
// seen; each token must be above the one before, the first above after. A
// token that is not fails the test and ends the cycles.
func (r Retry) Cycles(t T, e engine.Engine, req engine.Request, n int, after uint64) uint64 {
	t.Helper()
	for i := range n {
		req.Mode = engine.Exclusive
		if i%3 == 2 && !e.Limits().ExclusiveOnly {
			req.Mode = engine.Shared
		}
		l := r.Grant(t, e, req)
		ctx, cancel := context.WithTimeout(context.Background(), r.Within)
		err := l.Release(ctx)
		cancel()
		if err != nil {
			t.Fatalf("release %s: %v", req.Key, err)
		}
		if l.Token() <= after {
			t.Errorf("grant %d (%v) of %s: token %d after %d; tokens must strictly increase", i+1, req.Mode,
				req.Key, l.Token(), after)
			return after
		}
		after = l.Token()
	}
	return after
}

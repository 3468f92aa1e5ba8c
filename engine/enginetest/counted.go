package enginetest

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// permits is the size of the semaphore in checkSemaphore.
const permits = 3

// counted is a request for one of limit permits of key, renewed, waiting.
func counted(key string, limit int, value string) engine.Request {
	r := hold(key)
	r.Mode, r.Limit, r.Value = engine.Shared, limit, value
	return r
}

// checkSemaphore: on an engine whose Limits say it counts, 3 TryLocks of
// a 3-permit key from 3 engines all succeed, a fourth is refused while 3
// are held and granted when one leaves, and an Inspector lists the 3
// holders with their values; then Clients engine instances each take a
// permit Rounds times: never more than 3 hold at once, and every grant has
// a token of its own. An
// engine that does not count must refuse a counted request before any I/O
// with ErrInvalidRequest.
func checkSemaphore(h *harness) {
	e := h.engine()
	key := h.key()
	if !e.Limits().Counted {
		req := counted(key, permits, "")
		if err := e.Validate(req); !errors.Is(err, engine.ErrInvalidRequest) {
			h.t.Errorf("Validate of a counted request on an engine without Limits().Counted: %v, want ErrInvalidRequest", err)
		}
		if l, err := e.Acquire(h.ctx(), req); !errors.Is(err, engine.ErrInvalidRequest) {
			if l != nil {
				_ = l.Release(context.Background())
			}
			h.t.Errorf("Acquire of a counted request on an engine without Limits().Counted: %v, want ErrInvalidRequest", err)
		}
		h.t.Logf("the engine has no counted mode: it refuses Request.Limit, as it must")
		return
	}
	checkPermitsByHand(h, e, key)
	checkPermitsUnderLoad(h, h.key())
}

// checkPermitsByHand takes the permits one TryLock at a time from
// separate engines and checks the count, the holders and the tokens.
func checkPermitsByHand(h *harness, e engine.Engine, key string) {
	var held []engine.Lease
	tokens := make(map[uint64]bool)
	for i := range permits {
		req := counted(key, permits, string(rune('a'+i)))
		req.Wait = false
		l := h.acquire(h.engine(), req)
		if tokens[l.Token()] {
			h.t.Errorf("permit %d has token %d, which another permit of the key has", i, l.Token())
		}
		tokens[l.Token()] = true
		held = append(held, l)
	}
	extra := counted(key, permits, "z")
	extra.Wait = false
	if l, err := e.Acquire(h.ctx(), extra); !errors.Is(err, engine.ErrNotAcquired) {
		if l != nil {
			_ = l.Release(context.Background())
		}
		h.t.Fatalf("a fourth TryLock of a 3-permit key while 3 are held: %v, want ErrNotAcquired", err)
	}
	if in, ok := e.(engine.Inspector); ok {
		hs, err := in.Holders(h.ctx(), key)
		if err != nil {
			h.t.Fatalf("Holders: %v", err)
		}
		if len(hs) != permits {
			h.t.Errorf("Holders lists %d holders of a key with %d permits held: %+v", len(hs), permits, hs)
		}
		for i, x := range hs {
			if i < len(held) && (x.Mode != engine.Shared || x.Token != held[i].Token() || x.Value != string(rune('a'+i))) {
				h.t.Errorf("holder %d is %+v, want shared, token %d, value %q", i, x, held[i].Token(), string(rune('a'+i)))
			}
		}
	}
	h.release(held[0])
	l := h.acquire(e, extra)
	h.release(l)
	for _, l := range held[1:] {
		h.release(l)
	}
	h.mustBeFree(e, key)
}

// checkPermitsUnderLoad has Clients engines take permits of key Rounds
// times each.
func checkPermitsUnderLoad(h *harness, key string) {
	clients := make([]engine.Engine, h.opts.Clients)
	for i := range clients {
		clients[i] = h.engine()
	}
	var (
		inside, most, over, failures atomic.Int64
		firstErr                     firstError
		mu                           sync.Mutex
		tokens                       = make(map[uint64]bool)
		dup                          int
	)
	var wg sync.WaitGroup
	for _, e := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range h.opts.Rounds {
				ctx, cancel := context.WithTimeout(context.Background(), hang)
				l, err := e.Acquire(ctx, counted(key, permits, ""))
				cancel()
				if err != nil {
					failures.Add(1)
					firstErr.set(err)
					return
				}
				n := inside.Add(1)
				if n > permits {
					over.Add(1)
				}
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				if tokens[l.Token()] {
					dup++
				}
				tokens[l.Token()] = true
				mu.Unlock()
				runtime.Gosched()
				// Long enough that permits overlap even where every grant
				// is a check-and-set of its own (Consul).
				time.Sleep(2 * time.Millisecond)
				inside.Add(-1)
				if err := l.Release(context.Background()); err != nil {
					failures.Add(1)
					firstErr.set(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		h.t.Errorf("%d acquire/release calls failed; first: %v", n, firstErr.get())
	}
	if n := over.Load(); n > 0 {
		h.t.Errorf("%d grants found %d permits already held: more than %d at once", n, permits, permits)
	}
	if dup > 0 {
		h.t.Errorf("%d grants reused a token of an earlier permit", dup)
	}
	// How many overlap at most here is timing (checkPermitsByHand holds
	// all of them at once for certain), so it is only logged.
	h.t.Logf("most permits held at once: %d of %d", most.Load(), permits)
	h.mustBeFree(clients[0], key)
}

// checkElection: on an Inspector, the holder of an exclusive lease is
// listed with its value and token; a second candidate waiting for the key
// is listed once the first leaves, with a larger token; a free key lists
// none; an invalid key is refused. On a Watcher the release and the next
// grant are notified. An engine with neither is logged and passes, and so
// is one whose Holders of a free key fails with errors.ErrUnsupported
// (an Inspector that does not serve it as configured).
func checkElection(h *harness) {
	a, b := h.engine(), h.engine()
	in, ok := b.(engine.Inspector)
	if !ok {
		h.t.Logf("the engine is not an engine.Inspector: elections cannot read their leader")
		return
	}
	if _, err := in.Holders(h.ctx(), ""); !errors.Is(err, engine.ErrInvalidKey) {
		h.t.Errorf("Holders of an empty key: %v, want ErrInvalidKey", err)
	}
	key := h.key()
	hs, err := in.Holders(h.ctx(), key)
	if errors.Is(err, errors.ErrUnsupported) {
		h.t.Logf("the engine does not serve Holders as configured (%v): elections cannot read their leader", err)
		return
	}
	if err != nil || len(hs) != 0 {
		h.t.Fatalf("Holders of a free key: %+v, %v; want none", hs, err)
	}
	first := hold(key)
	first.Value = "candidate-a"
	la := h.acquire(a, first)
	mustLead(h, in, key, la, "candidate-a")
	var changes <-chan struct{}
	if w, ok := b.(engine.Watcher); ok {
		ctx, cancel := context.WithCancel(context.Background())
		h.t.Cleanup(cancel)
		ch, err := w.Watch(ctx, key)
		if err != nil {
			h.t.Fatalf("Watch: %v", err)
		}
		changes = ch
	}
	second := hold(key)
	second.Value = "candidate-b"
	got := make(chan engine.Lease, 1)
	failed := make(chan error, 1)
	sctx := h.ctx()
	go func() {
		// Only sends: the check's T is not touched from here.
		l, err := b.Acquire(sctx, second)
		if err != nil {
			failed <- err
			got <- nil
			return
		}
		got <- l
	}()
	time.Sleep(50 * time.Millisecond)
	mustLead(h, in, key, la, "candidate-a") // a waiting candidate is no holder
	h.release(la)
	var lb engine.Lease
	select {
	case lb = <-got:
	case <-time.After(hang):
		h.t.Fatalf("the second candidate was not elected within %v of the first's release", hang)
	}
	if lb == nil {
		h.t.Fatalf("second candidate: %v", <-failed)
	}
	if lb.Token() <= la.Token() {
		h.t.Errorf("the second leader's token %d is not above the first's %d", lb.Token(), la.Token())
	}
	mustLead(h, in, key, lb, "candidate-b")
	if changes != nil {
		select {
		case <-changes:
		case <-time.After(hang):
			h.t.Errorf("Watch told nothing of a release and a grant within %v", hang)
		}
	}
	h.release(lb)
	deadline := time.Now().Add(hang)
	for {
		hs, err := in.Holders(h.ctx(), key)
		if err == nil && len(hs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("Holders of a released key: %+v, %v; want none", hs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mustLead fails unless in lists l alone as key's exclusive holder, with
// value.
func mustLead(h *harness, in engine.Inspector, key string, l engine.Lease, value string) {
	h.t.Helper()
	hs, err := in.Holders(h.ctx(), key)
	if err != nil {
		h.t.Fatalf("Holders: %v", err)
	}
	if len(hs) != 1 || hs[0].Mode != engine.Exclusive || hs[0].Token != l.Token() || hs[0].Value != value {
		h.t.Fatalf("Holders = %+v, want one exclusive holder with token %d and value %q", hs, l.Token(), value)
	}
}

// toldGrace is how long after another candidate's election a check waits
// for an expired leader's Done to be seen closed: scheduling only, as the
// engine must close it before the server can elect anyone else.
const toldGrace = 100 * time.Millisecond

// checkElectionTakeover: leadership changes hands when the leader's lease
// expires and when its engine closes, not only on resign. A leader on a
// fixed lease is followed by the waiting candidate once the lease runs
// out, and the old leader has been told (Done closed, ErrLeaseLost) by
// then; a leader whose engine closes ends with ErrClosed and the next
// waiting candidate follows. Each new term's token is above the last, and
// Holders names the new leader.
func checkElectionTakeover(h *harness) {
	a, b, c := h.engine(), h.engine(), h.engine()
	in, ok := c.(engine.Inspector)
	if !ok {
		h.t.Logf("the engine is not an engine.Inspector: elections cannot read their leader")
		return
	}
	key := h.key()
	if _, err := in.Holders(h.ctx(), key); errors.Is(err, errors.ErrUnsupported) {
		h.t.Logf("the engine does not serve Holders as configured (%v): elections cannot read their leader", err)
		return
	}
	first := hold(key)
	first.Renew, first.TTL, first.Value = false, h.ttl(), "expiring"
	la := h.acquire(a, first)
	mustLead(h, in, key, la, "expiring")

	// The candidate's goroutine only sends: the check's T is not touched
	// once the check may have ended.
	type result struct {
		l   engine.Lease
		err error
	}
	campaign := func(e engine.Engine, value string) <-chan result {
		got := make(chan result, 1)
		req := hold(key)
		req.Value = value
		ctx, cancel := context.WithTimeout(context.Background(), 10*h.ttl()+hang)
		h.t.Cleanup(cancel)
		go func() {
			l, err := e.Acquire(ctx, req)
			got <- result{l, err}
		}()
		return got
	}
	elected := func(got <-chan result, what string) engine.Lease {
		h.t.Helper()
		select {
		case r := <-got:
			if r.err != nil {
				h.t.Fatalf("%s: the candidate failed: %v", what, r.err)
			}
			return r.l
		case <-time.After(10*h.ttl() + hang):
			h.t.Fatalf("%s: no new leader within %v", what, 10*h.ttl()+hang)
			return nil
		}
	}

	lb := elected(campaign(b, "after-expiry"), "after the leader's lease expired")
	select {
	case <-la.Done():
	case <-time.After(toldGrace):
		h.t.Errorf("a new leader was elected while the expired leader's Done stayed open (%v after)", toldGrace)
	}
	if !errors.Is(la.Err(), engine.ErrLeaseLost) {
		h.t.Errorf("expired leadership ended with %v, want ErrLeaseLost", la.Err())
	}
	if lb.Token() <= la.Token() {
		h.t.Errorf("the token after expiry %d is not above the expired leader's %d", lb.Token(), la.Token())
	}
	mustLead(h, in, key, lb, "after-expiry")

	got := campaign(c, "after-close")
	time.Sleep(50 * time.Millisecond)
	if err := b.Close(); err != nil {
		h.t.Errorf("Close of the leader's engine: %v", err)
	}
	lc := elected(got, "after the leader's engine closed")
	select {
	case <-lb.Done():
	case <-time.After(toldGrace):
		h.t.Errorf("a new leader was elected while the closed engine's leader's Done stayed open (%v after)", toldGrace)
	}
	if !errors.Is(lb.Err(), engine.ErrClosed) {
		h.t.Errorf("leadership of a closed engine ended with %v, want ErrClosed", lb.Err())
	}
	if lc.Token() <= lb.Token() {
		h.t.Errorf("the token after the close %d is not above the last leader's %d", lc.Token(), lb.Token())
	}
	mustLead(h, in, key, lc, "after-close")
	h.release(lc)
}

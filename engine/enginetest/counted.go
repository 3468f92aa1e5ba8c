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
// grant are notified. An engine with neither is logged and passes.
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
	if hs, err := in.Holders(h.ctx(), key); err != nil || len(hs) != 0 {
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
	go func() {
		l, err := b.Acquire(h.ctx(), second)
		if err != nil {
			h.t.Errorf("second candidate: %v", err)
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
		return
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

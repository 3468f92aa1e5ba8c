package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestNoGrantOnAStaleEpoch: a waiter whose etcd lease is no longer known to
// live (its process was stopped past the lease's expiry, and it wakes to
// the deletion that would grant it before its renewal loop can end the
// epoch) is refused, and its entry is given back, instead of being handed
// a lease whose entry may already be gone. The stop is simulated by
// clearing the epoch's validity; a round in which a renewal restored it
// before the grant proves nothing and is run again.
func TestNoGrantOnAStaleEpoch(t *testing.T) {
	addr := testenv.EtcdAddr(t)
	dialT := func() *Engine {
		e, err := Dial(clientv3.Config{Endpoints: []string{addr}}, WithLeaseTTL(6*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	holder, waiter := dialT(), dialT()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := 0; ; round++ {
		if round == 5 {
			t.Fatal("every round saw a renewal between the simulated stop and the grant")
		}
		key := fmt.Sprintf("etcd-test/stale/%d/%d", time.Now().UnixNano(), round)
		req := engine.Request{Key: key, Mode: engine.Exclusive, TTL: 6 * time.Second, Renew: true, Wait: true}
		held, err := holder.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   engine.Lease
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := waiter.Acquire(ctx, req)
			got <- result{l, err}
		}()
		var ep *epoch
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the waiter's entry never appeared")
			}
			resp, err := waiter.c().Get(ctx, waiter.queueRange(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			waiter.mu.Lock()
			ep = waiter.cur
			waiter.mu.Unlock()
			if resp.Count == 2 && ep != nil {
				break
			}
		}
		ep.valid.Store(0)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if ep.valid.Load() != 0 {
			// A renewal landed meanwhile: the grant was rightly made.
			if r.err == nil {
				_ = r.l.Release(ctx)
			}
			continue
		}
		if r.err == nil {
			_ = r.l.Release(ctx)
			t.Fatalf("granted token %d on an epoch not known to live", r.l.Token())
		}
		t.Logf("refused: %v", r.err)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			resp, err := waiter.c().Get(ctx, waiter.queueRange(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Count == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the refused waiter left %d entries", resp.Count)
			}
		}
	}
}

// TestLossToldWhileRenewalHangs: with the server stopped (SIGSTOP), every
// renewal hangs; the lease must still be told by the instant the engine
// counts it valid until (the last renewal's send time plus the TTL, less
// engine.Margin), not once a hung renewal gives up at the expiry itself
// and a read of the force-release marks has waited out its own timeout.
func TestLossToldWhileRenewalHangs(t *testing.T) {
	srv := testenv.StartEtcd(t)
	e, err := Dial(clientv3.Config{Endpoints: []string{srv.Addr}, DialTimeout: time.Second},
		WithLeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := e.Acquire(ctx, engine.Request{Key: "hang/renewal", Mode: engine.Exclusive, TTL: 2 * time.Second,
		Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a renewal or two
	srv.Pause()
	defer srv.Resume()
	time.Sleep(50 * time.Millisecond) // a renewal answered just before the stop has landed
	e.mu.Lock()
	ep := e.cur
	e.mu.Unlock()
	if ep == nil {
		t.Fatal("no epoch")
	}
	valid := time.Unix(0, ep.valid.Load())
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease was not told within 10s of the server's stop")
	}
	if late := time.Since(valid); late > 150*time.Millisecond {
		t.Errorf("told %v after the lease's validity ended (%v)", late.Round(time.Millisecond), l.Err())
	}
}

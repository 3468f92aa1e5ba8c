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

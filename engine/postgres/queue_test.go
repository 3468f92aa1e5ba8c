package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// TestQueueCrashedWaiterExpires: a waiter's ticket that nobody refreshes
// (its process crashed) holds the key back from later requests, even a
// TryLock on a free key, only until it expires on the server's clock;
// then the key is granted, and the winner leaves no ticket behind.
func TestQueueCrashedWaiterExpires(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	e, err := Open(dsn, WithTable(table), WithStrategy(StrategyLease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	const key, life = "queue/crashed", 1500 * time.Millisecond
	req := engine.Request{Key: key, TTL: 10 * time.Second}
	// The key was held and released once: its row exists, as it does
	// for any key a waiter queued on.
	first, err := e.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(hangCtx(t), "INSERT INTO "+quote(table+"_queue")+" (lock_key, owner, mode, expires_at) "+
		"VALUES ($1, 'crashed-1', 0, now() + $2::bigint * interval '1 microsecond')", key, life.Microseconds()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if l, err := e.Acquire(hangCtx(t), req); !errors.Is(err, engine.ErrNotAcquired) {
		if err == nil {
			_ = l.Release(context.Background())
		}
		t.Fatalf("TryLock of a free key behind an unexpired ticket: %v, want ErrNotAcquired", err)
	}
	req.Wait = true
	l, err := e.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	defer func() { _ = l.Release(context.Background()) }()
	if waited < life-200*time.Millisecond || waited > life+3*time.Second {
		t.Errorf("granted after %v; the crashed waiter's ticket lived %v", waited, life)
	}
	var left int
	if err := pool.QueryRow(hangCtx(t), "SELECT count(*) FROM "+quote(table+"_queue")+
		" WHERE lock_key = $1 AND owner <> 'crashed-1'", key).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d tickets left behind by the winner", left)
	}
}

// TestSlowGrantRenewedInTime: a renewed lease whose grant waited on its
// key's row (another transaction held it) for most of its validity is
// renewed a third of its TTL after the grant was sent, which is at once
// here: the server counts its expiry from the grant's transaction start.
// Before, the first renewal came a third of the TTL after the grant's
// answer, past the lease's validity, and the lease was lost ("its
// validity ran out before its renewal was sent").
func TestSlowGrantRenewedInTime(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	e := openT(t, dsn, WithTable(table), WithStrategy(StrategyLease))
	// held is past the first renewal's latest start (a third of ttl)
	// less the margin: life(3s) = 2.7s, less 1s.
	const key, ttl, held = "renew/slow-grant", 3 * time.Second, 1900 * time.Millisecond
	req := engine.Request{Key: key, TTL: ttl, Renew: true, Wait: true}
	// The key was held and released once: its row exists.
	first, err := e.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(hangCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(hangCtx(t), "SELECT 1 FROM "+quote(table)+" WHERE lock_key = $1 FOR UPDATE",
		key); err != nil {
		t.Fatal(err)
	}
	type result struct {
		l    engine.Lease
		err  error
		took time.Duration
	}
	got := make(chan result, 1)
	go func() {
		start := time.Now()
		l, err := e.Acquire(hangCtx(t), req)
		got <- result{l, err, time.Since(start)}
	}()
	// The grant's first statement waits for the row this long.
	time.Sleep(held)
	if err := tx.Commit(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("grant after the row was let go: %v", r.err)
	}
	defer func() { _ = r.l.Release(context.Background()) }()
	if r.took < ttl/3 {
		t.Fatalf("the grant took %v, less than a third of the TTL: the row lock did not hold it", r.took)
	}
	select {
	case <-r.l.Done():
		t.Fatalf("a lease granted after %v ended within %v: %v", r.took, ttl, r.l.Err())
	case <-time.After(ttl):
	}
}

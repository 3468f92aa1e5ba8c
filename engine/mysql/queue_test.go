package mysql

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
	db := rawDB(t, dsn)
	e, err := Open(dsn, WithTable(table))
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
	if _, err := db.Exec("INSERT INTO `"+table+"_queue` (`lock_key`, `owner`, `mode`, `expires_at`) "+
		"VALUES (?, 'crashed-1', 0, NOW(6) + INTERVAL ? MICROSECOND)", key, life.Microseconds()); err != nil {
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
	if err := db.QueryRow("SELECT COUNT(*) FROM `"+table+"_queue` WHERE `lock_key` = ? AND `owner` <> 'crashed-1'",
		key).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d tickets left behind by the winner", left)
	}
}

package kit

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestLockCtx: LockCtx takes a free mutex, waits for a held one and is
// handed it at its unlock, gives up when ctx ends first (and the mutex is
// free again once its holder lets go), and waits without a deadline when
// ctx cannot end.
func TestLockCtx(t *testing.T) {
	var mu sync.Mutex
	if !LockCtx(context.Background(), &mu) {
		t.Fatal("a free mutex was not taken")
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if !LockCtx(ctx, &mu) {
		t.Fatal("a mutex unlocked within the deadline was not taken")
	}
	if took := time.Since(start); took < 40*time.Millisecond {
		t.Errorf("took a held mutex after %v, before its holder let go", took)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if LockCtx(short, &mu) {
		t.Fatal("took a mutex that stayed held past the deadline")
	}
	mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for !mu.TryLock() {
		if time.Now().After(deadline) {
			t.Fatal("the mutex stayed locked after a LockCtx that gave up")
		}
		time.Sleep(time.Millisecond)
	}
	mu.Unlock()
}

package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// RunCloseTellsFirst checks the order of a Close: an engine from newEngine
// holds a key, an engine of its own (as another process) waits for it, and
// the holder's engine closes. The holder must be told (Request.OnLost has
// run and Done has closed) before the waiter is granted the key; its
// OnLost takes a while on purpose, so that an engine that frees the key
// first lets the waiter in meanwhile and fails.
func RunCloseTellsFirst(t *testing.T, newEngine Factory) {
	t.Helper()
	holder, err := newEngine()
	if err != nil {
		t.Fatalf("new engine: %v", err)
	}
	defer holder.Close()
	waiter, err := newEngine()
	if err != nil {
		t.Fatalf("new engine: %v", err)
	}
	defer waiter.Close()
	const slowTell = 300 * time.Millisecond
	ctx := context.Background()
	key := "close-" + runID()
	ttl := max(5*time.Second, holder.Limits().MinTTL)
	l, err := holder.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: ttl, Renew: true,
		OnLost: func(error) { time.Sleep(slowTell) }})
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	toldFirst := make(chan bool, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, ttl+20*time.Second)
		defer cancel()
		w, err := waiter.Acquire(wctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: ttl, Wait: true})
		if err != nil {
			t.Errorf("waiting acquire of %s: %v", key, err)
			close(toldFirst)
			return
		}
		select {
		case <-l.Done():
			toldFirst <- true
		default:
			toldFirst <- false
		}
		_ = w.Release(context.Background())
	}()
	time.Sleep(200 * time.Millisecond) // let the waiter queue
	_ = holder.Close()
	if told, ok := <-toldFirst; ok && !told {
		t.Errorf("the waiter was granted %s while the closed holder had not been told", key)
	}
}

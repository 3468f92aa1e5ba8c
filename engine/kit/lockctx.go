package kit

import (
	"context"
	"sync"
)

// LockCtx locks mu, or gives up when ctx ends first (a connection that
// runs one statement at a time under mu can have a long queue under
// latency); it reports whether it locked. A caller that must wait does so
// in mu.Lock on a goroutine of its own, so that it is handed the mutex as
// soon as it is free; if ctx ends first, that goroutine unlocks mu again
// once it has it.
func LockCtx(ctx context.Context, mu *sync.Mutex) bool {
	if mu.TryLock() {
		return true
	}
	if ctx.Done() == nil {
		mu.Lock()
		return true
	}
	got := make(chan struct{})
	go func() {
		mu.Lock()
		close(got)
	}()
	select {
	case <-got:
		return true
	case <-ctx.Done():
		go func() {
			<-got
			mu.Unlock()
		}()
		return false
	}
}

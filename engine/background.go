package engine

import "sync"

// Background runs an engine's clean-ups (an undo after a lost reply, the
// removal of what a cancelled wait left) in goroutines that the engine's
// Close waits for, so that no caller waits for them past its context. The
// zero value is ready to use.
type Background struct {
	mu     sync.Mutex
	wg     sync.WaitGroup
	closed bool
}

// Run runs f in a goroutine, or, once Wait has been called, at once on the
// caller's goroutine.
func (b *Background) Run(f func()) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		f()
		return
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		f()
	}()
}

// Wait makes later Runs synchronous and waits for the goroutines already
// started. Each clean-up must bound its own I/O.
func (b *Background) Wait() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}

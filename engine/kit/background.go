package kit

import (
	"sync"
	"time"
)

// Background runs an engine's clean-ups (an undo after a lost reply, the
// removal of what a cancelled wait left) in goroutines that the engine's
// Close waits for, so that no caller waits for them long past its context. The
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

// UndoWait bounds how long a call that ended without a lease (its context
// ended, its reply was lost, its grant came too late) waits for the
// clean-up of what it left on the server before it returns. A server that
// answers needs a round trip, so the next caller finds the key as it should
// be; a server that does not costs the caller at most this, and the
// clean-up goes on in the background.
const UndoWait = 250 * time.Millisecond

// RunUpTo runs f as Run does and waits for it to finish, but no longer
// than d.
func (b *Background) RunUpTo(d time.Duration, f func()) {
	done := make(chan struct{})
	b.Run(func() {
		defer close(done)
		f()
	})
	WaitUpTo(done, d)
}

// WaitUpTo waits until done is closed, but no longer than d, and reports
// whether done was closed.
func WaitUpTo(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// Wait makes later Runs synchronous and waits for the goroutines already
// started. Each clean-up must bound its own I/O.
func (b *Background) Wait() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}

// WaitUpTo is Wait, but it waits no longer than d, and reports whether
// every goroutine had finished by then; the rest finish on their own.
func (b *Background) WaitUpTo(d time.Duration) bool {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(done)
	}()
	return WaitUpTo(done, d)
}

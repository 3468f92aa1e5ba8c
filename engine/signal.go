package engine

import (
	"errors"
	"fmt"
	"sync"
)

// Signal is the end-of-lease notice every engine needs: a channel closed
// once, the reason it was closed, and the Request.OnLost callback. The zero
// value is not usable; call NewSignal.
type Signal struct {
	done   chan struct{}
	mu     sync.Mutex
	ending bool // Close has begun
	err    error
	onLost func(error)
}

// NewSignal returns an open Signal that will call onLost (which may be nil)
// when it is closed with any error other than one wrapping ErrReleased.
func NewSignal(onLost func(error)) *Signal {
	return &Signal{done: make(chan struct{}), onLost: onLost}
}

// Done is closed by the first Close.
func (s *Signal) Done() <-chan struct{} { return s.done }

// Err is nil until the first Close begins, then the error it was given.
func (s *Signal) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the signal with err and reports whether this call did so; later
// calls change nothing. Unless err wraps ErrReleased it calls onLost before
// Done closes, so whoever wakes on Done sees onLost's effects. onLost runs
// synchronously: callers must not hold locks that onLost might need.
func (s *Signal) Close(err error) bool {
	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		return false
	}
	s.ending, s.err = true, err
	s.mu.Unlock()
	if s.onLost != nil && !errors.Is(err, ErrReleased) {
		s.onLost(err)
	}
	close(s.done)
	return true
}

// Closed reports whether Close has been called.
func (s *Signal) Closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// NotHeld is what a lease's Release returns when the lease no longer holds
// key: it closes s with ErrLeaseLost if s is still open, and returns an
// error that wraps ErrNotHeld and names key and the reason the lease ended.
func (s *Signal) NotHeld(key string) error {
	s.Close(ErrLeaseLost)
	return fmt.Errorf("%w: %q (lease ended: %w)", ErrNotHeld, key, s.Err())
}

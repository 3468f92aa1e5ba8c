package engine

import (
	"errors"
	"sync"
)

// Signal is the end-of-lease notice every engine needs: a channel closed
// once, the reason it was closed, and the Request.OnLost callback. The zero
// value is not usable; call NewSignal.
type Signal struct {
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
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

// Err is nil until the first Close, then the error it was given.
func (s *Signal) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the signal with err and reports whether this call did so; later
// calls change nothing. Unless err wraps ErrReleased it then calls onLost
// synchronously, so callers must not hold locks that onLost might need.
func (s *Signal) Close(err error) bool {
	first := false
	s.once.Do(func() {
		first = true
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	})
	if first && s.onLost != nil && !errors.Is(err, ErrReleased) {
		s.onLost(err)
	}
	return first
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

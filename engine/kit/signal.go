package kit

import (
	"errors"
	"fmt"
	"github.com/cerberus-go/cerberus/engine"
	"sync"
	"sync/atomic"
)

// Signal is the end-of-lease notice every engine needs: a channel closed
// once, the reason it was closed, and the engine.Request.OnLost callback. The
// channel is made by the first Done, so a lease whose Done nobody asks for
// (an engine lease under the root Lease, say) keeps none. The zero value
// is not usable; call NewSignal.
type Signal struct {
	done   atomic.Pointer[chan struct{}] // nil until Done or the end
	mu     sync.Mutex
	ending bool // Close has begun
	ended  bool // Close has called onLost: Done is (or will be made) closed
	err    error
	onLost func(error)
}

// closedChan is the Done of a Signal that ended before anyone asked.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// NewSignal returns an open Signal that will call onLost (which may be nil)
// when it is closed with any error other than one wrapping engine.ErrReleased.
func NewSignal(onLost func(error)) *Signal {
	return &Signal{onLost: onLost}
}

// Done is closed by the first Close.
func (s *Signal) Done() <-chan struct{} {
	if c := s.done.Load(); c != nil {
		return *c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.done.Load(); c != nil {
		return *c
	}
	c := closedChan
	if !s.ended {
		c = make(chan struct{})
	}
	s.done.Store(&c)
	return c
}

// Err is nil until the first Close begins, then the error it was given.
func (s *Signal) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the signal with err and reports whether this call did so; later
// calls change nothing. Unless err wraps engine.ErrReleased it calls onLost before
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
	if s.onLost != nil && !errors.Is(err, engine.ErrReleased) {
		s.onLost(err)
	}
	s.mu.Lock()
	s.ended = true
	if c := s.done.Load(); c != nil {
		close(*c)
	}
	s.mu.Unlock()
	return true
}

// Closed reports whether Close has been called and has closed Done (its
// onLost has returned).
func (s *Signal) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// NotHeld is what a lease's Release returns when the lease no longer holds
// key: it closes s with engine.ErrLeaseLost if s is still open, and returns an
// error that wraps engine.ErrNotHeld and names key and the reason the lease ended.
func (s *Signal) NotHeld(key string) error {
	s.Close(engine.ErrLeaseLost)
	return fmt.Errorf("%w: %q (lease ended: %w)", engine.ErrNotHeld, key, s.Err())
}

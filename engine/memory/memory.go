package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// Store is the shared state behind memory engines: what a server is to the
// clients of a network engine. The zero value is not usable; call NewStore.
type Store struct {
	mu    sync.Mutex
	locks map[string]*entry
	seq   uint64 // the last token granted, for every key
}

// entry is the state of one key. It exists while the key is held or waited
// on, and is removed when neither is true.
type entry struct {
	writer  *lease
	readers map[*lease]struct{}
	// queue holds the waiters in arrival order. A release hands the key
	// to the head of the queue (and to the readers right behind a reader
	// head) before anyone else can take it, so waiters are served in
	// arrival order and a newcomer never barges past them.
	queue []*waiter
}

// waiter is one Acquire waiting in an entry's queue.
type waiter struct {
	l     *lease
	ready chan struct{} // closed when the key is handed to l
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{locks: make(map[string]*entry)}
}

// Option configures an Engine.
type Option func(*Engine)

// WithStore makes the engine share s with other engines, as clients of one
// server would. The default is a new Store of the engine's own.
func WithStore(s *Store) Option { return func(e *Engine) { e.store = s } }

// Engine is an in-process engine.Engine.
type Engine struct {
	store *Store

	mu    sync.Mutex // guards frame and the leases' timers
	frame engine.Base[*lease]
}

var _ engine.Engine = (*Engine)(nil)

// New returns a memory engine.
func New(opts ...Option) *Engine {
	e := &Engine{}
	e.frame.Init(&e.mu)
	for _, o := range opts {
		o(e)
	}
	if e.store == nil {
		e.store = NewStore()
	}
	return e
}

// Name returns "memory".
func (e *Engine) Name() string { return "memory" }

// Limits returns the common bounds from package engine.
func (e *Engine) Limits() engine.Limits {
	return engine.Common
}

// Validate checks req with engine.CheckRequest.
func (e *Engine) Validate(req engine.Request) error {
	return engine.CheckRequest(req, e.Limits())
}

// Ping returns engine.ErrClosed after Close, nil before.
func (e *Engine) Ping(ctx context.Context) error {
	if e.frame.Closed() {
		return engine.ErrClosed
	}
	return ctx.Err()
}

// Acquire grants a lease; see engine.Engine.
func (e *Engine) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := e.frame.Begin(ctx, e.Validate(req)); err != nil {
		return nil, err
	}
	l := &lease{eng: e, key: req.Key, mode: req.Mode, sig: engine.NewSignal(req.OnLost)}
	s := e.store
	s.mu.Lock()
	ent := s.entry(req.Key)
	if len(ent.queue) == 0 && ent.free(req.Mode) {
		s.grant(ent, l)
		s.mu.Unlock()
		return e.granted(l, req)
	}
	if !req.Wait {
		s.tidy(req.Key, ent)
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key)
	}
	w := &waiter{l: l, ready: make(chan struct{})}
	ent.queue = append(ent.queue, w)
	s.mu.Unlock()

	var stop error
	select {
	case <-w.ready:
		return e.granted(l, req)
	case <-ctx.Done():
		stop = errors.Join(engine.ErrNotAcquired, ctx.Err())
	case <-e.frame.Closing():
		stop = engine.ErrClosed
	}
	s.mu.Lock()
	select {
	case <-w.ready:
		// Handed the key just as the wait ended: give it to the next.
		s.mu.Unlock()
		s.drop(l)
		return nil, stop
	default:
	}
	ent = s.locks[req.Key]
	ent.leave(w)
	s.handOff(ent) // readers held back by this writer may go now
	s.tidy(req.Key, ent)
	s.mu.Unlock()
	return nil, stop
}

// granted finishes a grant: registers the lease with its engine (or undoes
// the grant if the engine closed meanwhile) and arms the expiry timer.
func (e *Engine) granted(l *lease, req engine.Request) (engine.Lease, error) {
	if err := e.frame.Track(l, func() error {
		if !req.Renew {
			l.timer = time.AfterFunc(req.TTL, l.expire)
		}
		return nil
	}); err != nil {
		e.store.drop(l)
		return nil, err
	}
	return l, nil
}

// Close releases every lease this engine holds and ends them with
// engine.ErrClosed. Waiters in Acquire return engine.ErrClosed.
func (e *Engine) Close() error {
	held, _ := e.frame.Shut()
	for _, l := range held {
		l.end(engine.ErrClosed)
	}
	return nil
}

// entry returns the key's entry, creating it. Call with s.mu held.
func (s *Store) entry(key string) *entry {
	ent := s.locks[key]
	if ent == nil {
		ent = &entry{readers: make(map[*lease]struct{})}
		s.locks[key] = ent
	}
	return ent
}

// grant gives the key to l with the next token. Call with s.mu held.
func (s *Store) grant(ent *entry, l *lease) {
	s.seq++
	l.token = s.seq
	if l.mode == engine.Exclusive {
		ent.writer = l
	} else {
		ent.readers[l] = struct{}{}
	}
}

// handOff grants the key to the head of the queue while it is free for
// it: one writer, or every reader up to the next writer. Call with s.mu
// held.
func (s *Store) handOff(ent *entry) {
	for len(ent.queue) > 0 && ent.free(ent.queue[0].l.mode) {
		w := ent.queue[0]
		ent.queue[0] = nil
		ent.queue = ent.queue[1:]
		s.grant(ent, w.l)
		close(w.ready)
	}
}

// leave takes w out of the queue.
func (ent *entry) leave(w *waiter) {
	for i, q := range ent.queue {
		if q == w {
			ent.queue = append(ent.queue[:i], ent.queue[i+1:]...)
			return
		}
	}
}

// tidy removes an entry nobody holds or waits on. Call with s.mu held.
func (s *Store) tidy(key string, ent *entry) {
	if ent.writer == nil && len(ent.readers) == 0 && len(ent.queue) == 0 && s.locks[key] == ent {
		delete(s.locks, key)
	}
}

// drop removes l from its key if it still holds it, and reports whether it
// did.
func (s *Store) drop(l *lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ent := s.locks[l.key]
	if ent == nil {
		return false
	}
	switch {
	case ent.writer == l:
		ent.writer = nil
	case l.mode == engine.Shared && hasReader(ent, l):
		delete(ent.readers, l)
	default:
		return false
	}
	s.handOff(ent)
	s.tidy(l.key, ent)
	return true
}

func hasReader(ent *entry, l *lease) bool {
	_, ok := ent.readers[l]
	return ok
}

// has reports whether the store keeps any state for key. Tests use it to
// check that nothing is left behind.
func (s *Store) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.locks[key] != nil
}

// free reports whether the key's holders admit one more in mode: no
// writer, and for a writer no readers either. Who is queued is the
// caller's concern.
func (ent *entry) free(mode engine.Mode) bool {
	return ent.writer == nil && (mode == engine.Shared || len(ent.readers) == 0)
}

// lease is a memory engine lease.
type lease struct {
	eng   *Engine
	key   string
	mode  engine.Mode
	token uint64
	sig   *engine.Signal
	timer *time.Timer // nil for renewed leases; guarded by eng.mu
}

func (l *lease) Key() string           { return l.key }
func (l *lease) Mode() engine.Mode     { return l.mode }
func (l *lease) Token() uint64         { return l.token }
func (l *lease) Done() <-chan struct{} { return l.sig.Done() }
func (l *lease) Err() error            { return l.sig.Err() }

// Release gives up the key if this lease still holds it.
func (l *lease) Release(ctx context.Context) error {
	if l.eng.store.drop(l) {
		l.stop()
		l.sig.Close(engine.ErrReleased)
		return nil
	}
	l.stop()
	return l.sig.NotHeld(l.key)
}

// expire ends a fixed-TTL lease when its timer fires.
func (l *lease) expire() { l.end(engine.ErrLeaseLost) }

// end takes the key from the lease, if it still holds it, and closes the
// lease with err.
func (l *lease) end(err error) {
	l.eng.store.drop(l)
	l.stop()
	l.sig.Close(err)
}

// stop disarms the expiry timer and forgets the lease.
func (l *lease) stop() {
	e := l.eng
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
	}
	e.frame.ForgetLocked(l)
}

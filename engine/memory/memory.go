package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// Store is the shared state behind memory engines: what a server is to the
// clients of a network engine. The zero value is not usable; call NewStore.
type Store struct {
	mu    sync.Mutex
	locks map[string]*entry
	seq   uint64 // the last token granted, for every key
	// watchers are the Watch channels of each key, told of every grant
	// and release.
	watchers map[string]map[chan struct{}]struct{}
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
	return &Store{locks: make(map[string]*entry), watchers: make(map[string]map[chan struct{}]struct{})}
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
	frame kit.Base[*lease]
}

var (
	_ engine.Engine    = (*Engine)(nil)
	_ engine.Inspector = (*Engine)(nil)
	_ engine.Watcher   = (*Engine)(nil)
)

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

// Limits returns the common bounds from package engine; the engine counts
// (Request.Limit).
func (e *Engine) Limits() engine.Limits {
	lim := engine.Common
	lim.Counted = true
	return lim
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
	l := &lease{LeaseCore: kit.NewLeaseCore(req.Key, req.Mode, req.OnLost), eng: e, limit: req.Limit,
		value: req.Value}
	s := e.store
	s.mu.Lock()
	ent := s.entry(req.Key)
	if len(ent.queue) == 0 && ent.free(l) {
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
	e.frame.Wait() // the Watch forwarders, which end with Close
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
	l.SetToken(s.seq)
	l.granted = time.Now()
	if l.Mode() == engine.Exclusive {
		ent.writer = l
	} else {
		ent.readers[l] = struct{}{}
	}
	s.notify(l.Key())
}

// notify tells key's watchers that its holders changed. Call with s.mu
// held.
func (s *Store) notify(key string) {
	for ch := range s.watchers[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// handOff grants the key to the head of the queue while it is free for
// it: one writer, or every reader up to the next writer (a counted reader
// while the count allows). Call with s.mu held.
func (s *Store) handOff(ent *entry) {
	for len(ent.queue) > 0 && ent.free(ent.queue[0].l) {
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
	ent := s.locks[l.Key()]
	if ent == nil {
		return false
	}
	switch {
	case ent.writer == l:
		ent.writer = nil
	case l.Mode() == engine.Shared && hasReader(ent, l):
		delete(ent.readers, l)
	default:
		return false
	}
	s.notify(l.Key())
	s.handOff(ent)
	s.tidy(l.Key(), ent)
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

// free reports whether the key's holders admit l: no writer, for a writer
// no readers either, and for a counted reader fewer readers than its
// limit. Who is queued is the caller's concern.
func (ent *entry) free(l *lease) bool {
	if ent.writer != nil {
		return false
	}
	if l.Mode() == engine.Exclusive {
		return len(ent.readers) == 0
	}
	return l.limit == 0 || len(ent.readers) < l.limit
}

// Holders lists the leases that hold key, in grant order; see
// engine.Inspector. It returns engine.ErrClosed after Close.
func (e *Engine) Holders(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := e.store
	s.mu.Lock()
	defer s.mu.Unlock()
	ent := s.locks[key]
	if ent == nil {
		return nil, nil
	}
	var out []engine.Holder
	if ent.writer != nil {
		out = append(out, ent.writer.holder())
	}
	for r := range ent.readers {
		out = append(out, r.holder())
	}
	slices.SortFunc(out, func(a, b engine.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return out, nil
}

// Watch reports every grant and release on key; see engine.Watcher. The
// channel is closed when ctx ends or the engine closes. It returns
// engine.ErrClosed after Close.
func (e *Engine) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	s := e.store
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.watchers[key] == nil {
		s.watchers[key] = make(map[chan struct{}]struct{})
	}
	s.watchers[key][ch] = struct{}{}
	s.mu.Unlock()
	out := make(chan struct{}, 1)
	wctx, cancel := e.frame.Bind(ctx)
	forward := func() {
		defer close(out)
		defer cancel()
		defer func() {
			s.mu.Lock()
			delete(s.watchers[key], ch)
			if len(s.watchers[key]) == 0 {
				delete(s.watchers, key)
			}
			s.mu.Unlock()
		}()
		for {
			select {
			case <-wctx.Done():
				return
			case <-ch:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}
	if !e.frame.Go(forward) {
		cancel()
		s.mu.Lock()
		delete(s.watchers[key], ch)
		s.mu.Unlock()
		return nil, engine.ErrClosed
	}
	return out, nil
}

// lease is a memory engine lease.
type lease struct {
	kit.LeaseCore
	eng   *Engine
	limit int         // Request.Limit
	value string      // Request.Value
	timer *time.Timer // nil for renewed leases; guarded by eng.mu

	granted time.Time // when the Store granted the key, for List
}

func (l *lease) holder() engine.Holder {
	return engine.Holder{Mode: l.Mode(), Token: l.Token(), Value: l.value}
}

// Release gives up the key if this lease still holds it.
func (l *lease) Release(ctx context.Context) error {
	if l.eng.store.drop(l) {
		l.stop()
		l.Signal.Close(engine.ErrReleased)
		return nil
	}
	l.stop()
	return l.Signal.NotHeld(l.Key())
}

// expire ends a fixed-TTL lease when its timer fires.
func (l *lease) expire() { l.end(engine.ErrLeaseLost) }

// end closes the lease with err and then takes the key from it, if it
// still holds it: the holder is told before anyone else can be granted
// the key.
func (l *lease) end(err error) {
	l.stop()
	l.Signal.Close(err)
	l.eng.store.drop(l)
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

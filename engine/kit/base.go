package kit

import (
	"context"
	"errors"
	"github.com/cerberus-go/cerberus/engine"
	"iter"
	"sync"
	"time"
)

// Base is the frame every engine puts around its protocol, written once:
//
//   - the Acquire preamble (Begin, or Enter and Exit for calls that Close
//     must wait for): validation first, then the closed check, then the
//     caller's context, with the same errors on every engine;
//   - the registry of live leases (Track, Forget, AllLocked, TakeLocked),
//     which refuses new leases once Close has begun;
//   - the closed state and its signals (Closed, Closing, Context, Bind);
//   - Close's bookkeeping (Shut, then ReleaseAll and the engine's own
//     ending of each lease with engine.ErrClosed, then Wait);
//   - background clean-ups that Close waits for (the embedded Background,
//     and Go).
//
// L is the engine's lease type, usually a pointer to it. An engine keeps
// a Base in a named field rather than embedding it, so that these methods
// do not join the engine's exported API:
//
//	type Engine struct {
//		mu    sync.Mutex // guards the engine's own state and frame's
//		frame kit.Base[*lease]
//		...
//	}
//
//	func New(...) *Engine {
//		e := &Engine{...}
//		e.frame.Init(&e.mu)
//		return e
//	}
//
//	func (e *Engine) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
//		if err := e.frame.Begin(ctx, e.Validate(req)); err != nil {
//			return nil, err
//		}
//		... the protocol; on a grant:
//		if err := e.frame.Track(l, nil); err != nil {
//			... give the grant back
//			return nil, err // engine.ErrClosed
//		}
//		return l, nil
//	}
//
//	func (e *Engine) Close() error {
//		held, first := e.frame.Shut()
//		if !first {
//			return nil
//		}
//		kit.ReleaseAll(held, timeout, func(ctx context.Context, l *lease) {
//			... release l on the server within ctx
//			l.sig.Close(engine.ErrClosed)
//		})
//		e.frame.Wait()
//		return nil
//	}
//
// Base guards its state with a mutex: the engine's own, passed to Init,
// when the engine must change its own state and Base's at once (a renewal
// loop that walks the leases, a session that is lost with all of them);
// methods whose names end in Locked must be called with that mutex held,
// the others must not (so the Locked ones are for engines that passed
// their mutex to Init). The zero value is ready to use with a mutex of its
// own; Init, if called, must come before any other method.
type Base[L comparable] struct {
	// Background runs clean-ups that Close waits for: Run, RunUpTo, and
	// Wait, which Close calls last.
	Background

	once   sync.Once
	mu     *sync.Mutex
	own    sync.Mutex
	closed bool
	ctx    context.Context // ends when Close begins
	cancel context.CancelCauseFunc
	leases map[L]struct{}
	calls  sync.WaitGroup // Enter ... Exit
}

// Init makes b guard its state with mu, the engine's mutex; nil keeps a
// mutex of b's own. Call it once, before any other method.
func (b *Base[L]) Init(mu *sync.Mutex) {
	b.mu = mu
	b.setup()
}

func (b *Base[L]) setup() {
	b.once.Do(func() {
		if b.mu == nil {
			b.mu = &b.own
		}
		b.leases = make(map[L]struct{})
		b.ctx, b.cancel = context.WithCancelCause(context.Background())
	})
}

func (b *Base[L]) lock() {
	b.setup()
	b.mu.Lock()
}

// Begin is Acquire's preamble. It returns invalid, the result of the
// engine's Validate, if it is not nil; engine.ErrClosed once Close has begun;
// errors.Join(engine.ErrNotAcquired, ctx.Err()) if ctx has ended; and otherwise
// nil. No engine does I/O before it.
func (b *Base[L]) Begin(ctx context.Context, invalid error) error {
	if invalid != nil {
		return invalid
	}
	if b.Closed() {
		return engine.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return errors.Join(engine.ErrNotAcquired, err)
	}
	return nil
}

// Enter is Begin for a call that Close must wait for (see WaitCalls): it
// returns what Begin returns, and when that is nil it has registered the
// call, and the caller must call Exit when the call returns. Once Close has
// begun no call enters.
func (b *Base[L]) Enter(ctx context.Context, invalid error) error {
	if invalid != nil {
		return invalid
	}
	b.lock()
	if b.closed {
		b.mu.Unlock()
		return engine.ErrClosed
	}
	b.calls.Add(1)
	b.mu.Unlock()
	if err := ctx.Err(); err != nil {
		b.calls.Done()
		return errors.Join(engine.ErrNotAcquired, err)
	}
	return nil
}

// Exit ends a call that Enter registered.
func (b *Base[L]) Exit() { b.calls.Done() }

// WaitCalls waits for every call that Enter registered to Exit. Call it
// after Shut, when no more calls can enter.
func (b *Base[L]) WaitCalls() { b.calls.Wait() }

// WaitCallsUpTo waits as WaitCalls does, but no longer than d, and
// reports whether every call has exited.
func (b *Base[L]) WaitCallsUpTo(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		b.calls.Wait()
		close(done)
	}()
	return WaitUpTo(done, d)
}

// Closed reports whether Close has begun (Shut has been called).
func (b *Base[L]) Closed() bool {
	b.lock()
	defer b.mu.Unlock()
	return b.closed
}

// ClosedLocked is Closed for a caller that holds the mutex.
func (b *Base[L]) ClosedLocked() bool { return b.closed }

// Closing is closed when Close begins: waits select on it and return
// engine.ErrClosed.
func (b *Base[L]) Closing() <-chan struct{} {
	b.setup()
	return b.ctx.Done()
}

// Context ends when Close begins; its cause is then engine.ErrClosed. It suits
// calls that take a context and must stop at Close, such as a loop that
// reads a session's events.
func (b *Base[L]) Context() context.Context {
	b.setup()
	return b.ctx
}

// Bind returns a context that ends with ctx or when Close begins, whichever
// comes first; in the second case context.Cause of it is engine.ErrClosed. Call
// the returned function when the work is done.
func (b *Base[L]) Bind(ctx context.Context) (context.Context, context.CancelFunc) {
	b.setup()
	bound, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(b.ctx, func() { cancel(engine.ErrClosed) })
	return bound, func() {
		stop()
		cancel(nil)
	}
}

// Track registers l as a live lease, unless Close has begun: then it
// returns engine.ErrClosed and the caller gives the grant back. check, if not
// nil, is called with the mutex held after the closed check and before l
// is registered: an error from it is returned and l is not registered (for
// example, the session that backs l was lost during the grant), and it is
// the place to arm l's expiry timer when that timer is guarded by the
// mutex.
func (b *Base[L]) Track(l L, check func() error) error {
	b.lock()
	defer b.mu.Unlock()
	if b.closed {
		return engine.ErrClosed
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	b.leases[l] = struct{}{}
	return nil
}

// Forget takes l out of the registry and reports whether it was there:
// whoever gets true is the one that ends l (after Shut, Close is).
func (b *Base[L]) Forget(l L) bool {
	b.lock()
	defer b.mu.Unlock()
	return b.ForgetLocked(l)
}

// ForgetLocked is Forget for a caller that holds the mutex.
func (b *Base[L]) ForgetLocked(l L) bool {
	_, ok := b.leases[l]
	delete(b.leases, l)
	return ok
}

// AllLocked yields the live leases, in no particular order. The caller
// holds the mutex for the whole walk and may Forget the lease it is given.
func (b *Base[L]) AllLocked() iter.Seq[L] {
	b.setup()
	return func(yield func(L) bool) {
		for l := range b.leases {
			if !yield(l) {
				return
			}
		}
	}
}

// TakeLocked empties the registry and returns what it held: the leases an
// engine ends all at once, as when a session is lost. The caller holds the
// mutex.
func (b *Base[L]) TakeLocked() []L {
	b.setup()
	held := make([]L, 0, len(b.leases))
	for l := range b.leases {
		held = append(held, l)
	}
	clear(b.leases)
	return held
}

// Shut begins Close: it marks b closed (Begin, Enter, Track and Go refuse
// from now on), ends Closing and Context, and returns the live leases,
// emptying the registry, so that the caller alone ends them (with
// engine.ErrClosed: see ReleaseAll). It reports false, with no leases, if Close had
// already begun: Close is then done.
func (b *Base[L]) Shut() (held []L, first bool) {
	b.lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, false
	}
	b.closed = true
	b.cancel(engine.ErrClosed)
	return b.TakeLocked(), true
}

// Go runs f in a goroutine that Wait waits for, and reports true; once
// Close has begun it does nothing and reports false. Unlike Run it never
// runs f on the caller's goroutine: it suits work that is pointless after
// Close (a queue worker, a removal the end of the session does anyway).
func (b *Base[L]) Go(f func()) bool {
	b.lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	bg := &b.Background
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if bg.closed {
		return false
	}
	bg.wg.Add(1)
	go func() {
		defer bg.wg.Done()
		f()
	}()
	return true
}

// ReleaseAll is the middle of Close: it calls release for every lease of
// held at once, each in a goroutine of its own, with a context that ends
// after d, and returns when every call has returned. release gives the
// lease up on the server within ctx (the key expires by itself where it
// cannot) and ends it with engine.ErrClosed. It suits any lease type, which is why
// it is not a method of Base.
func ReleaseAll[L any](held []L, d time.Duration, release func(ctx context.Context, l L)) {
	if len(held) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release(ctx, l)
		}()
	}
	wg.Wait()
}

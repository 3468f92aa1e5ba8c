package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// Client is the part of a go-redis client the engine uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and every redis.UniversalClient
// (including Sentinel's failover client) satisfy it.
type Client interface {
	goredis.Scripter
	Pipeline() goredis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
	Ping(ctx context.Context) *goredis.StatusCmd
}

// Option configures an Engine.
type Option func(*options)

type options struct {
	prefix   string
	fair     bool
	starve   time.Duration
	recheck  time.Duration
	queueTTL time.Duration
	timeout  time.Duration
}

// WithPrefix sets the prefix of every Redis key and channel the engine
// uses. It must not contain '{' or '}'. The default is DefaultPrefix.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithFair turns fair mode on or off. In fair mode waiting writers get the
// lock in arrival order, as Redisson's fair lock does. The default is off:
// unordered, bounded by WithStarvation: a free key goes to whoever asks
// first, and a release hands it to the waiting writer that has gone
// longest without trying (see the package doc, "Hand-off").
func WithFair(on bool) Option { return func(o *options) { o.fair = on } }

// WithStarvation sets how long a writer waits in the default (unordered)
// mode before it takes a place in the key's arrival-order queue. From then
// until that queue drains, the key goes only to the queue's head and every
// other waiter queues behind it, as Go's sync.Mutex does in its starvation
// mode: new arrivals and a releaser that locks again at once cannot
// overtake a waiter for ever. Zero turns this off (pure racing). It has no
// effect with WithFair, where every waiter queues. The default is
// DefaultStarvation.
func WithStarvation(d time.Duration) Option { return func(o *options) { o.starve = d } }

// Defaults of the engine's options.
const (
	// DefaultPrefix is the default WithPrefix.
	DefaultPrefix = "cerberus:"
	// DefaultStarvation is the default WithStarvation threshold.
	DefaultStarvation = 10 * time.Millisecond
	// DefaultRecheck is the default WithRecheck.
	DefaultRecheck = 500 * time.Millisecond
	// DefaultQueueTTL is the default WithQueueTTL.
	DefaultQueueTTL = 5 * time.Second
	// DefaultOpTimeout is the default WithOpTimeout.
	DefaultOpTimeout = 2 * time.Second
)

// WithRecheck bounds how long a waiter sleeps without a notification before
// it tries again: the most a lost pub/sub message can cost. It must be
// between 10ms and a third of the queue TTL. The default is
// DefaultRecheck.
func WithRecheck(d time.Duration) Option { return func(o *options) { o.recheck = d } }

// WithQueueTTL sets how long a waiting writer keeps its place (in the fair
// queue, and ahead of new readers) without refreshing it; a waiter refreshes
// it on every attempt, so only a crashed waiter loses it. The default is
// DefaultQueueTTL.
func WithQueueTTL(d time.Duration) Option { return func(o *options) { o.queueTTL = d } }

// WithOpTimeout bounds each Redis round trip: those made outside a caller's
// context (renewals, releases on Close) and, within the caller's context,
// Ping, each acquire attempt and Release. A round trip that runs out of it
// while the caller's context is live fails with engine.ErrUnavailable: a
// server, or a Sentinel client that finds none, that cannot answer in time
// is not serving. The default is DefaultOpTimeout.
func WithOpTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Engine is the Redis engine.Engine. Create it with New.
type Engine struct {
	c    Client
	opts options
	id   string // prefix of this engine's lease ids
	seq  atomic.Uint64
	hub  *hub
	// sweep sends again the clean-ups that got no answer.
	sweep sweeper

	// Script arguments every lease sends, boxed once.
	argWake, argQueueTTL any

	mu        sync.Mutex       // guards frame, wakeAt and the leases' renewal state
	frame     kit.Base[*lease] // the leases this engine holds; undos that callers do not wait for
	renewNow  chan struct{}    // pokes the renewal loop
	wakeAt    time.Time        // when the renewal loop next wakes; guarded by mu
	loopDone  chan struct{}
	renewPace kit.Pace // refuses new leases while renewal cannot keep up (pace)
}

var (
	_ engine.Engine          = (*Engine)(nil)
	_ engine.Inspector       = (*Engine)(nil)
	_ engine.Watcher         = (*Engine)(nil)
	_ engine.RenewalReporter = (*Engine)(nil)
)

// New returns a Redis engine over c. It does no I/O; the renewal loop starts
// now and stops at Close. Close does not close c.
func New(c Client, opts ...Option) (*Engine, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: redis: nil client", engine.ErrInvalidRequest)
	}
	o := options{prefix: DefaultPrefix, starve: DefaultStarvation, recheck: DefaultRecheck,
		queueTTL: DefaultQueueTTL, timeout: DefaultOpTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case strings.ContainsAny(o.prefix, "{}"):
		return nil, fmt.Errorf("%w: redis: prefix %q contains a brace", engine.ErrInvalidRequest,
			o.prefix)
	case o.queueTTL < 30*time.Millisecond:
		return nil, fmt.Errorf("%w: redis: queue TTL %v is under 30ms", engine.ErrInvalidRequest,
			o.queueTTL)
	case o.recheck < 10*time.Millisecond || o.recheck > o.queueTTL/3:
		return nil, fmt.Errorf("%w: redis: recheck %v must be between 10ms and a third of the queue TTL "+
			"(%v)", engine.ErrInvalidRequest, o.recheck, o.queueTTL)
	case o.starve < 0:
		return nil, fmt.Errorf("%w: redis: starvation threshold %v is negative", engine.ErrInvalidRequest,
			o.starve)
	case o.timeout <= 0:
		return nil, fmt.Errorf("%w: redis: timeout %v is not positive", engine.ErrInvalidRequest,
			o.timeout)
	}
	var b [9]byte
	_, _ = rand.Read(b[:])
	e := &Engine{
		c: c, opts: o, id: hex.EncodeToString(b[:]),
		renewNow: make(chan struct{}, 1),
		loopDone: make(chan struct{}),
	}
	e.frame.Init(&e.mu)
	e.argWake, e.argQueueTTL = e.wakePrefix(), ms(o.queueTTL)
	e.hub = newHub(e)
	e.sweep.e = e
	go e.renewLoop()
	return e, nil
}

// wakePrefix is the prefix of every engine's wake channel: a release that
// names a waiting writer publishes on the prefix followed by the engine id
// that starts the waiter's lease id.
func (e *Engine) wakePrefix() string { return e.opts.prefix + "wake:" }

// Name returns "redis".
func (e *Engine) Name() string { return "redis" }

// Limits: keys up to engine.MaxKeyLen bytes, TTLs from 10ms (PX has
// millisecond resolution) to engine.MaxTTL; Request.Limit is honoured by
// the acquire script (see the package doc, "Semaphores").
func (e *Engine) Limits() engine.Limits {
	lim := engine.Common
	lim.Counted = true
	return lim
}

// Validate checks req with engine.CheckRequest; Redis stores any valid key.
func (e *Engine) Validate(req engine.Request) error {
	return engine.CheckRequest(req, e.Limits())
}

// Ping sends PING.
func (e *Engine) Ping(ctx context.Context) error {
	if e.frame.Closed() {
		return engine.ErrClosed
	}
	rctx, cancel := e.roundTrip(ctx)
	defer cancel()
	if err := e.c.Ping(rctx).Err(); err != nil {
		return e.opError(ctx, "ping", "", err)
	}
	return nil
}

// roundTrip bounds one round trip made for a caller by the engine's
// timeout (WithOpTimeout).
func (e *Engine) roundTrip(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.opts.timeout)
}

// opError wraps a Redis failure of a call made for a caller whose context
// is ctx, classified by engine.Classify with denied and down.
func (e *Engine) opError(ctx context.Context, op, key string, err error) error {
	return &engine.OpError{Engine: "redis", Op: op, Key: key,
		Err: engine.Classify(ctx, err, denied, down)}
}

// denied reports an access-control refusal: NOAUTH, WRONGPASS, NOPERM, or
// a connection Redis closed because it was not authenticated.
func denied(err error) bool {
	return goredis.IsAuthError(err) || goredis.IsPermissionError(err)
}

// down reports a failure that says the server is not serving now: any
// failure without a Redis error reply (dial, I/O, a closed or exhausted
// pool), or a reply that the server is loading, has lost its master or
// cluster, is busy with a script, is a read-only replica, or has too many
// clients. Other replies (a script error, NOSCRIPT, OOM) are the server's
// own refusal.
func down(err error) bool {
	var re goredis.Error
	if !errors.As(err, &re) {
		return !errors.Is(err, context.Canceled)
	}
	return goredis.IsLoadingError(err) || goredis.IsMasterDownError(err) ||
		goredis.IsTryAgainError(err) ||
		goredis.IsClusterDownError(err) || goredis.IsReadOnlyError(err) ||
		goredis.IsMaxClientsError(err) ||
		goredis.HasErrorPrefix(err, "BUSY ")
}

func ms(d time.Duration) int64 {
	m := d.Milliseconds()
	if time.Duration(m)*time.Millisecond < d {
		m++ // round up: never hold for less than asked
	}
	return m
}

// Acquire grants a lease; see engine.Engine.
func (e *Engine) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := e.frame.Begin(ctx, e.Validate(req)); err != nil {
		return nil, err
	}
	if err := e.renewPace.Err(); err != nil {
		return nil, &engine.OpError{Engine: "redis", Op: "acquire", Key: req.Key, Err: err}
	}
	a := e.newAttempt(req)
	defer e.putAttempt(a)
	var w *waiter // joined after the first refusal: uncontended locks never subscribe
	if req.Wait {
		// Once the engine listens already, join before the first attempt:
		// a refusal then needs no second one.
		w = e.hub.joinReady(a.rel.keys.c, a.id, req.Mode == engine.Shared)
	}
	queued := false // registered as a waiting writer on the server
	var waitSince, answered time.Time
	defer func() {
		if w != nil {
			e.hub.leave(w)
		}
	}()
	for {
		sent := time.Now()
		starving := queued && !e.opts.fair && e.opts.starve > 0 && sent.Sub(waitSince) >= e.opts.starve
		// A waiter outlasts a server that stops answering for less than
		// the queue TTL since its last answer: its place lives that long.
		outlast := queued && sent.Sub(answered) < e.opts.queueTTL
		lease, n, err := e.tryOnce(ctx, a, req, queued, starving, sent, outlast)
		if errors.Is(err, errAgain) {
			if lease, err := e.await(ctx, a, w, 0, queued); lease != nil || err != nil {
				return lease, err
			}
			continue
		}
		if lease != nil || err != nil {
			return lease, err
		}
		answered = sent
		if !req.Wait {
			return nil, fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key)
		}
		if !queued {
			waitSince = sent
		}
		queued = true // a waiting writer or reader is registered on the server
		if w == nil {
			// Subscribe, then try again at once: a release published
			// between the refusal and the subscription is not lost.
			w = e.hub.join(ctx, a.rel.keys.c, a.id, req.Mode == engine.Shared)
			continue
		}
		if lease, err := e.await(ctx, a, w, n, queued); lease != nil || err != nil {
			return lease, err
		}
	}
}

// errAgain is tryOnce's answer when a waiting attempt got no answer from
// a server that is not serving (see down) and the waiter outlasts it: the
// waiter keeps its place and tries again after its recheck pause. An
// attempt whose grant went unanswered is found again by the next one,
// which sees its own lease id in :w.
var errAgain = errors.New("redis: no answer; the waiter tries again")

// tryOnce runs the acquire script once, sent at sent. It returns the lease
// when the key is granted; nil and no error when it is refused, with n the
// holder's remaining TTL in milliseconds; errAgain when the server did not
// answer and outlast (a queued waiter, within the queue TTL of its last
// answer) says to wait on; or the error that ends the Acquire.
func (e *Engine) tryOnce(ctx context.Context, a *attempt, req engine.Request, queued, starving bool,
	sent time.Time, outlast bool) (engine.Lease, int64, error) {
	rctx, cancel := e.roundTrip(ctx)
	ok, n, err := a.try(rctx, req.Wait, queued, starving)
	cancel()
	if err != nil && outlast && ctx.Err() == nil && down(err) {
		return nil, 0, errAgain
	}
	if err != nil {
		// The reply is lost, not necessarily the write: undo whatever the
		// script may have done under this lease's id, waiting for it no
		// longer than kit.UndoWait.
		e.undoUpTo(a, queued || req.Wait)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, 0, errors.Join(engine.ErrNotAcquired, ctxErr)
		}
		return nil, 0, e.opError(ctx, "acquire", req.Key, err)
	}
	if !ok {
		return nil, n, nil
	}
	if time.Since(a.at) >= a.life() {
		// The reply came after the lease's TTL had run out (the process
		// was stopped, or the network held it): the key may be someone
		// else's by now.
		e.undoUpTo(a, false)
		return nil, 0, fmt.Errorf("%w: %q: the grant arrived after its %v TTL had run out",
			engine.ErrNotAcquired, req.Key, a.ttl)
	}
	lease, err := e.granted(a, uint64(n), a.at)
	return lease, 0, err
}

// await waits for a wake-up from w, the key's release as published, or
// the re-check: sooner when n, the holder's remaining TTL in milliseconds,
// runs out first. It returns the lease when the release handed the key to
// this waiter (see handedOff). When ctx ends or the engine closes it undoes
// what the wait left on the server (a waiter's mark, if queued) and
// returns the error that ends the Acquire.
func (e *Engine) await(ctx context.Context, a *attempt, w *waiter, n int64, queued bool) (engine.Lease, error) {
	// Between half the recheck interval and all of it, at random, so that
	// waiters that began together do not try again together.
	pause := e.opts.recheck/2 + mrand.N(e.opts.recheck/2+1)
	if n > 0 && time.Duration(n)*time.Millisecond < pause {
		pause = time.Duration(n)*time.Millisecond + time.Millisecond // the holder's TTL runs out first
	}
	timer := time.NewTimer(pause)
	defer timer.Stop()
	select {
	case <-w.wake:
		if g, ok := e.hub.granted(w); ok {
			return e.handedOff(a, g)
		}
	case <-timer.C:
	case <-ctx.Done():
		e.undoUpTo(a, queued)
		return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
	case <-e.frame.Closing():
		e.undoUpTo(a, queued)
		return nil, engine.ErrClosed
	}
	return nil, nil
}

// granted registers the lease of a granted attempt with the engine and
// arms its expiry or renewal, or gives the key back if the engine closed
// meanwhile. The attempt is dropped: the lease keeps only what it needs.
func (e *Engine) granted(a *attempt, token uint64, sent time.Time) (engine.Lease, error) {
	l := a.lease
	l.SetToken(token)
	poke := false
	if err := e.frame.Track(l, func() error {
		l.valid = sent.Add(l.life())
		if l.renew {
			l.due = sent.Add(l.ttl / 3)
			poke = l.due.Before(e.wakeAt)
		} else {
			l.timer = time.AfterFunc(time.Until(l.valid), l.expire)
		}
		return nil
	}); err != nil {
		a.undo(false)
		return nil, err
	}
	if poke {
		e.poke()
	}
	return l, nil
}

// forget stops tracking l and reports whether it was tracked.
func (e *Engine) forget(l *lease) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
	}
	return e.frame.ForgetLocked(l)
}

// Close releases every lease the engine holds, ends them with
// engine.ErrClosed, wakes waiters with engine.ErrClosed, and stops the
// renewal loop and the pub/sub connection. It does not close the client.
func (e *Engine) Close() error {
	held, first := e.frame.Shut()
	if !first {
		return nil
	}
	e.mu.Lock()
	for _, l := range held {
		if l.timer != nil {
			l.timer.Stop()
		}
	}
	e.mu.Unlock()
	<-e.loopDone
	if len(held) > 0 {
		// Each holder is told before its key is released, so that its Done
		// has closed before a waiter can be granted the key.
		for _, l := range held {
			l.Signal.Close(engine.ErrClosed)
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.opts.timeout)
		release := func() error {
			pipe := e.c.Pipeline()
			for _, l := range held {
				l.relArgs().releaseCmd(ctx, pipe)
			}
			_, err := pipe.Exec(ctx)
			return err
		}
		// Best effort: the keys expire by themselves. A server that never
		// ran the release scripts (no lease was released on it before)
		// answers NOSCRIPT to the pipeline's EVALSHA: load them and retry,
		// or the keys would stay held for a whole lease period.
		if err := release(); hasNoScript(err) {
			loadScripts(ctx, e.c)
			_ = release()
		}
		cancel()
	}
	e.hub.close()
	e.frame.Wait() // each is bounded by the engine's timeout
	return nil
}

// RenewalSlack implements engine.RenewalReporter: the room the last
// renewal round left the lease with the least of it (see Engine.pace);
// ok is false while the engine renews no lease.
func (e *Engine) RenewalSlack() (time.Duration, bool) { return e.renewPace.Slack() }

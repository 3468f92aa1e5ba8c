package consul

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// cleanupTimeout bounds every server call made on a context that is not the
// caller's (releases after cancellation, expiry, Close) and Ping within the
// caller's.
const cleanupTimeout = 5 * time.Second

// Engine is an engine.Engine on Consul sessions and KV locks.
type Engine struct {
	client *api.Client
	kv     *api.KV
	cfg    config

	idBase string        // random per engine, prefix of lease ids
	seq    atomic.Uint64 // lease id counter

	sessLock chan struct{} // one session creation at a time; a lock that honours ctx
	turns    kit.Turns     // one blocking-query waiter per key
	fences   fenceCache    // the fencing counters of the engine's last grants
	// queueSlots bounds the default-mode writers that queue at once (each
	// holds its own blocking query), so that they leave connections for
	// releases; see WithStarvation.
	queueSlots chan struct{}

	ownTransport *http.Transport // the transport Dial built, nil with New

	mu       sync.Mutex       // guards frame and sess
	frame    kit.Base[*lease] // the leases; undos that callers do not wait for
	sess     *session         // the current session; nil before the first grant or after a loss
	wg       sync.WaitGroup   // session goroutines
	expiring sync.WaitGroup   // server releases of expired leases; Add under mu while open
}

var _ engine.Engine = (*Engine)(nil)

// New returns an engine that uses client. The engine does no I/O until the
// first Acquire or Ping; Close leaves client usable.
func New(client *api.Client, opts ...Option) (*Engine, error) {
	if client == nil {
		return nil, errors.New("consul: nil client")
	}
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	e := &Engine{
		client:     client,
		kv:         client.KV(),
		cfg:        cfg,
		idBase:     hex.EncodeToString(b[:]),
		sessLock:   make(chan struct{}, 1),
		queueSlots: make(chan struct{}, max(1, cfg.maxConns/2)),
	}
	e.frame.Init(&e.mu)
	return e, nil
}

// Dial builds a consul API client for the agent at address (host:port),
// using WithTLS, WithToken and WithDatacenter from opts, and returns an
// engine on it.
func Dial(address string, opts ...Option) (*Engine, error) {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxConns < 1 {
		return nil, fmt.Errorf("%w: consul: max conns %d is under 1", engine.ErrInvalidRequest,
			cfg.maxConns)
	}
	ac := api.DefaultNonPooledConfig()
	// A pooled transport with a cap: the non-pooled default opens a new
	// connection per request, so a burst of waiters meets the agent's
	// per-client connection limit.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = cfg.maxConns, cfg.maxConns
	ac.Transport = tr
	ac.Address = address
	ac.Token = ""
	ac.TokenFile = ""
	if cfg.tls != nil {
		ac.Scheme = "https"
		ac.TLSConfig = *cfg.tls
		// api.NewClient applies ac.TLSConfig only to a transport without
		// a TLS config, and a clone of http.DefaultTransport has one (its
		// HTTP/2 set-up), so the CA and client certificate would be
		// ignored: build the TLS config here.
		tc, err := api.SetupTLSConfig(cfg.tls)
		if err != nil {
			return nil, fmt.Errorf("consul: TLS for %s: %w", address, err)
		}
		tr.TLSClientConfig = tc
	}
	if cfg.datacenter != "" {
		ac.Datacenter = cfg.datacenter
	}
	client, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("consul: client for %s: %w", address, err)
	}
	e, err := New(client, opts...)
	if err != nil {
		return nil, err
	}
	e.ownTransport = tr // Dial made it: Close closes its idle connections
	return e, nil
}

// Name returns "consul".
func (e *Engine) Name() string { return name }

// Limits returns the common bounds from package engine, except that lease
// periods below the engine's Floor are refused: a holder that stops
// talking keeps its keys until Consul invalidates its session (within two
// session TTLs) and the lock-delay has passed, whatever period it asked
// for. Every key that engine.CheckKey accepts can be stored (see
// EncodeKey).
func (e *Engine) Limits() engine.Limits {
	lim := engine.Common
	lim.Floor = Floor(e.cfg.sessionTTL, e.cfg.lockDelay)
	lim.MinTTL = lim.Floor
	lim.Counted = true
	return lim
}

// Floor is the shortest lease period an engine with this session TTL and
// lock-delay can honour: Consul invalidates a silent session between one
// and two TTLs after its last renewal, and its keys stay locked for the
// lock-delay after that. With the defaults, 2 x 10s + 10s = 30s; with
// WithSessionTTL(10 * time.Second) and WithLockDelay(0), 20s.
func Floor(sessionTTL, lockDelay time.Duration) time.Duration {
	return 2*sessionTTL + lockDelay
}

// Validate checks req with engine.CheckRequest, without I/O.
func (e *Engine) Validate(req engine.Request) error {
	return engine.CheckRequest(req, e.Limits())
}

// Ping asks the agent for the cluster leader. It returns engine.ErrClosed
// after Close, and an *engine.OpError wrapping engine.ErrUnavailable when
// the agent does not answer within ctx and 5s, or knows no leader.
func (e *Engine) Ping(ctx context.Context) error {
	if e.frame.Closed() {
		return engine.ErrClosed
	}
	pctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	leader, err := e.client.Status().LeaderWithQueryOptions(e.query(pctx))
	if err != nil {
		return e.opErr(ctx, "ping", "", err)
	}
	if leader == "" {
		return e.opErr(ctx, "ping", "", errNoLeader)
	}
	return nil
}

// query returns the read options every request uses.
func (e *Engine) query(ctx context.Context) *api.QueryOptions {
	q := &api.QueryOptions{Token: e.cfg.token, Datacenter: e.cfg.datacenter}
	return q.WithContext(ctx)
}

// write returns the write options every request uses.
func (e *Engine) write(ctx context.Context) *api.WriteOptions {
	w := &api.WriteOptions{Token: e.cfg.token, Datacenter: e.cfg.datacenter}
	return w.WithContext(ctx)
}

// newID returns a lease id unique across engines.
func (e *Engine) newID() string {
	return fmt.Sprintf("%s%x", e.idBase, e.seq.Add(1))
}

// Acquire grants a lease; see engine.Engine. Exclusive leases lock the
// key's document with the engine's session; Shared leases follow Consul's
// semaphore recipe (see the package documentation). Waiting uses blocking
// queries bounded by WithRecheck.
func (e *Engine) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := e.frame.Begin(ctx, e.Validate(req)); err != nil {
		return nil, err
	}
	// wctx ends with the caller's ctx or with Close (cause ErrClosed).
	wctx, cancel := e.frame.Bind(ctx)
	defer cancel()

	l := &lease{
		LeaseCore: kit.NewLeaseCore(req.Key, req.Mode, req.OnLost),
		e:         e, id: e.newID(), limit: req.Limit, value: req.Value, dir: e.keyDir(req.Key),
	}
	l.doc = l.dir + docName
	err := e.acquire(wctx, l, req)
	if err != nil {
		ended := wctx.Err() != nil
		if ended || l.queued || e.frame.Closed() {
			// A call may have reached the server, or a waiter key is
			// queued: take back whatever is left, on a context the
			// caller's end does not cancel, waiting for it no longer than
			// kit.UndoWait.
			e.frame.RunUpTo(kit.UndoWait, func() { e.undo(l) })
		}
		switch {
		case ended && ctx.Err() != nil:
			return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
		case ended || e.frame.Closed():
			return nil, engine.ErrClosed
		}
		return nil, err
	}
	return e.granted(l, req)
}

// granted registers a lease that the server granted, arming its expiry
// timer, or undoes the grant if the engine closed or the session was lost
// meanwhile.
func (e *Engine) granted(l *lease, req engine.Request) (engine.Lease, error) {
	if err := e.frame.Track(l, func() error {
		s := l.sess
		s.mu.Lock()
		lost := s.lost
		if !lost {
			s.leases[l] = struct{}{}
		}
		s.mu.Unlock()
		if lost {
			return &engine.OpError{Engine: name, Op: "acquire", Key: l.Key(),
				Err: fmt.Errorf("%w: the session was lost during the grant", engine.ErrUnavailable)}
		}
		if !req.Renew {
			l.mu.Lock()
			l.timer = time.AfterFunc(req.TTL, l.expire)
			l.mu.Unlock()
		}
		return nil
	}); err != nil {
		e.undo(l)
		return nil, err
	}
	return l, nil
}

// Close releases every lease the engine holds (deleting their keys, so no
// lock-delay applies), ends them with engine.ErrClosed, makes waiting
// Acquire calls return engine.ErrClosed, and destroys the session. It waits
// at most a few seconds for the server. The client stays open. Close is
// idempotent.
func (e *Engine) Close() error {
	held, first := e.frame.Shut()
	if !first {
		return nil
	}
	e.mu.Lock()
	s := e.sess // no session is made after Shut
	e.sess = nil
	e.mu.Unlock()

	// One bound for the releases and the session's end together.
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	kit.ReleaseAll(held, cleanupTimeout, func(ctx context.Context, l *lease) {
		if l.claim() {
			// Told first, so that its Done has closed before a waiter can
			// be granted the key.
			l.finish(engine.ErrClosed)
			_, _ = l.releaseOnServer(ctx)
		}
	})
	e.expiring.Wait()
	if s != nil {
		s.stopAndDestroy(ctx)
	}
	e.wg.Wait()
	e.frame.Wait()
	if e.ownTransport != nil {
		e.ownTransport.CloseIdleConnections()
	}
	return nil
}

// undo removes whatever a failed or abandoned Acquire may have left on the
// server for l. Failures are handed to the session to retry.
func (e *Engine) undo(l *lease) {
	if l.sess == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := l.takeBack(ctx); err != nil {
		l.sess.addOrphan(l)
	}
}

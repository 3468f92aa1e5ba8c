package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Engine is an engine.Engine on etcd. Make one with Dial or New.
type Engine struct {
	client   atomic.Pointer[clientv3.Client] // nil until a Dial with credentials has connected
	dialCfg  *clientv3.Config                // set by a Dial with credentials
	dialSem  chan struct{}                   // held while that dial runs
	owns     bool                            // Dial made the client: Close closes it
	prefix   string
	leaseTTL time.Duration // asked for
	recheck  time.Duration
	granted  atomic.Int64 // the lease period etcd granted, ns; 0 until known

	grantSem chan struct{} // held while an etcd lease is being granted

	mu    sync.Mutex // guards frame and cur
	frame kit.Base[*lease]
	cur   *epoch // the live etcd lease; nil before the first grant and after a loss
}

var _ engine.Engine = (*Engine)(nil)
var _ engine.Inspector = (*Engine)(nil)
var _ engine.Watcher = (*Engine)(nil)

// New returns an engine on a client the caller made with clientv3.New
// (endpoints, TLS and credentials are the client's). The engine grants its
// etcd lease at the first Acquire, not here: an engine whose servers cannot
// be reached is returned all the same, and its calls fail with an
// *engine.OpError wrapping engine.ErrUnavailable. Close does not close cli.
func New(cli *clientv3.Client, opts ...Option) (*Engine, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcd: New needs a client", engine.ErrInvalidRequest)
	}
	e, err := newEngine(opts)
	if err != nil {
		return nil, err
	}
	e.client.Store(cli)
	return e, nil
}

func newEngine(opts []Option) (*Engine, error) {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.prefix == "":
		return nil, fmt.Errorf("%w: etcd: empty key prefix", engine.ErrInvalidRequest)
	case cfg.leaseTTL < time.Second:
		return nil, fmt.Errorf("%w: etcd: lease TTL %v is under one second", engine.ErrInvalidRequest,
			cfg.leaseTTL)
	case cfg.recheck <= 0:
		return nil, fmt.Errorf("%w: etcd: recheck %v must be positive", engine.ErrInvalidRequest, cfg.recheck)
	}
	e := &Engine{
		prefix: cfg.prefix, leaseTTL: cfg.leaseTTL.Truncate(time.Second), recheck: cfg.recheck,
		grantSem: make(chan struct{}, 1), dialSem: make(chan struct{}, 1),
	}
	e.frame.Init(&e.mu)
	if e.leaseTTL < cfg.leaseTTL {
		e.leaseTTL += time.Second
	}
	return e, nil
}

// Dial makes a client with cfg (endpoints, TLS, username and password)
// and returns an engine that owns it: Close closes it. Like New, it does
// not wait for the cluster to answer, unless cfg.DialTimeout asks the
// client to. With a username and password, whose token the client fetches
// as it connects, the client is made at the engine's first call instead,
// within the lease TTL, so that Dial still does no I/O: a wrong password
// is then that call's *engine.OpError wrapping engine.ErrAccessDenied.
// Without cfg.Logger the client logs nothing (its default logs every
// retried call to stderr).
func Dial(cfg clientv3.Config, opts ...Option) (*Engine, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: etcd: no endpoints", engine.ErrInvalidRequest)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	e, err := newEngine(opts)
	if err != nil {
		return nil, err
	}
	e.owns = true
	if cfg.Username != "" || cfg.Password != "" {
		e.dialCfg = &cfg
		return e, nil
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, &engine.OpError{Engine: "etcd", Op: "dial",
			Err: engine.Classify(context.Background(), err, denied, down)}
	}
	e.client.Store(cli)
	return e, nil
}

// c returns the client. Every call that runs before the engine holds an
// etcd lease gets it with connect first; after that it is set.
func (e *Engine) c() *clientv3.Client { return e.client.Load() }

// connect returns the client, making it first for a Dial with
// credentials: within the lease TTL, and no longer than ctx (a dial
// that ctx gives up on goes on in the background and keeps its client).
func (e *Engine) connect(ctx context.Context) (*clientv3.Client, error) {
	if c := e.client.Load(); c != nil {
		return c, nil
	}
	select {
	case e.dialSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c := e.client.Load(); c != nil {
		<-e.dialSem
		return c, nil
	}
	cfg := *e.dialCfg
	cfg.DialTimeout = e.ttl()
	type result struct {
		c   *clientv3.Client
		err error
	}
	res := make(chan result, 1)
	go func() {
		defer func() { <-e.dialSem }()
		c, err := clientv3.New(cfg)
		if err == nil {
			e.mu.Lock()
			if e.frame.ClosedLocked() {
				_ = c.Close()
				c, err = nil, engine.ErrClosed
			} else {
				e.client.Store(c)
			}
			e.mu.Unlock()
		}
		res <- result{c, err}
	}()
	select {
	case r := <-res:
		return r.c, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Name returns "etcd".
func (e *Engine) Name() string { return "etcd" }

// ttl is the etcd lease period: the granted one once known.
func (e *Engine) ttl() time.Duration {
	if g := time.Duration(e.granted.Load()); g > 0 {
		return g
	}
	return e.leaseTTL
}

// Limits returns the common bounds from package engine. Shorter lease
// periods than the etcd lease TTL are accepted and honoured while the
// holder runs, but a holder that stops talking keeps its keys until etcd
// expires the engine's lease: Floor is that TTL (the longer of the asked
// and the granted one) plus one second for etcd's lease checks. See the
// package documentation for what a leader election adds.
func (e *Engine) Limits() engine.Limits {
	lim := engine.Common
	lim.Floor = max(e.leaseTTL, time.Duration(e.granted.Load())) + time.Second
	lim.Counted = true
	return lim
}

// Validate checks req with engine.CheckRequest. Every key CheckKey accepts
// is a valid etcd key, so there are no further rules.
func (e *Engine) Validate(req engine.Request) error {
	return engine.CheckRequest(req, e.Limits())
}

// Ping checks that the cluster answers a linearizable read (which needs a
// leader). It returns engine.ErrClosed after Close and an *engine.OpError
// wrapping engine.ErrUnavailable when no answer comes within the lease
// TTL; if ctx ends first, the error wraps ctx.Err() instead.
func (e *Engine) Ping(ctx context.Context) error {
	if e.frame.Closed() {
		return engine.ErrClosed
	}
	bctx, cancel := e.bound(ctx)
	defer cancel()
	cli, err := e.connect(bctx)
	if err != nil {
		return e.opError(ctx, "ping", "", err)
	}
	if _, err := cli.Get(bctx, e.prefix, clientv3.WithCountOnly()); err != nil {
		return e.opError(ctx, "ping", "", err)
	}
	return nil
}

// bound limits a call made for a caller to the lease TTL, within ctx: a
// cluster that does not answer in it is unavailable (the engine's lease is
// as good as lost), and no call waits for it forever.
func (e *Engine) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.ttl())
}

// Close ends the engine: waiting Acquire calls return engine.ErrClosed,
// the etcd lease is revoked (which deletes every entry the engine holds or
// waits with, in one request, within the lease TTL), every lease ends with
// engine.ErrClosed, and background clean-ups finish. The client passed to
// New stays open. Close is idempotent.
func (e *Engine) Close() error {
	held, first := e.frame.Shut()
	if !first {
		return nil
	}
	e.mu.Lock()
	ep := e.cur
	e.cur = nil
	e.mu.Unlock()
	bound := e.ttl()
	e.frame.WaitCallsUpTo(bound)
	// Each holder is told before the revoke frees its key, so that its
	// Done has closed before a waiter can be granted the key.
	for _, l := range held {
		if l.markEnded() {
			l.Signal.Close(fmt.Errorf("%w: etcd engine closed", engine.ErrClosed))
		}
	}
	if ep != nil {
		ep.end()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		_, _ = e.c().Revoke(ctx, ep.id)
		cancel()
	}
	e.frame.WaitUpTo(bound)
	if c := e.client.Load(); c != nil && e.owns {
		_ = c.Close()
	}
	return nil
}

// errLeaseGone says that the engine's etcd lease ended while a call
// needed it: its keys are gone with it.
var errLeaseGone = errors.New("etcd: the engine's lease ended")

// opError wraps a server failure of a call made for a caller whose context
// is ctx, classified by engine.Classify: etcd's permission and
// authentication refusals are engine.ErrAccessDenied; connection failures,
// a cluster without a leader or overloaded, a lost etcd lease and the
// engine's own deadlines are engine.ErrUnavailable.
func (e *Engine) opError(ctx context.Context, op, key string, err error) error {
	return &engine.OpError{Engine: "etcd", Op: op, Key: key, Err: engine.Classify(ctx, err, denied, down)}
}

// code returns the gRPC code of an etcd client error.
func code(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Unknown
}

// denied reports a refusal by etcd's authentication or role permissions.
func denied(err error) bool {
	switch code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrAuthFailed) ||
		errors.Is(err, rpctypes.ErrInvalidAuthToken) || errors.Is(err, rpctypes.ErrUserEmpty)
}

// down reports a failure that says the cluster cannot serve now.
func down(err error) bool {
	if errors.Is(err, errLeaseGone) || errors.Is(err, clientv3.ErrNoAvailableEndpoints) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Canceled, codes.Aborted:
		return true
	}
	return false
}

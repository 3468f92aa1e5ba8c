package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
	"github.com/go-zookeeper/zk"
)

// Conn is the part of *zk.Conn the engine uses.
type Conn interface {
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	CreateContainer(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Children(path string) ([]string, *zk.Stat, error)
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	Exists(path string) (bool, *zk.Stat, error)
	ExistsW(path string) (bool, *zk.Stat, <-chan zk.Event, error)
	Get(path string) ([]byte, *zk.Stat, error)
	GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error)
	Delete(path string, version int32) error
	Multi(ops ...any) ([]zk.MultiResponse, error)
	SessionID() int64
	State() zk.State
}

var _ Conn = (*zk.Conn)(nil)

// Engine is an engine.Engine on ZooKeeper. Make one with Dial or New.
type Engine struct {
	conn     Conn
	own      *zk.Conn // made by Dial, closed by Close; nil with New
	base     string   // chroot + base path
	released string   // base + "/%released": the tombstone folders (see release.go)
	acl      []zk.ACL
	recheck  time.Duration

	requested  time.Duration // session timeout asked for
	negotiated atomic.Int64  // session timeout granted, ns; 0 if unknown
	lastRead   *atomic.Int64 // unix ns of the last byte from the server; nil with New

	auth     []byte // digest credentials to add to an own connection
	authMu   sync.Mutex
	authDone bool

	mu    sync.Mutex // guards frame and sess
	frame kit.Base[*lease]
	sess  session

	// Counters and hooks for tests (export_test.go).
	nodeEvents  atomic.Int64 // watch notifications received, but those of the tombstone watch
	listings    atomic.Int64 // listings of a queue
	existsCalls atomic.Int64 // czxids asked for with Exists
	pokes       atomic.Int64 // counted grants that poked their successor
	hooks       *hooks
}

var (
	_ engine.Engine    = (*Engine)(nil)
	_ engine.Inspector = (*Engine)(nil)
	_ engine.Watcher   = (*Engine)(nil)
)

// hooks let tests observe a waiter's progress without sleeping.
type hooks struct {
	queued   func(path string) // a queue node was created
	watching func(path string) // a waiter set its watch on path
	session  func(up bool)     // the session came up or went down
}

// Dial connects to the ZooKeeper servers, asking for the session timeout
// WithSessionTimeout sets, and returns an engine that owns the connection: Close closes it, which ends
// the session and so removes every node it still holds.
//
// Dial does not wait for the connection: an engine whose servers cannot be
// reached is returned all the same, and its Acquire and Ping calls fail with
// an *engine.OpError wrapping engine.ErrUnavailable.
func Dial(servers []string, opts ...Option) (*Engine, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: zookeeper: no servers", engine.ErrInvalidRequest)
	}
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	e, err := newEngine(cfg)
	if err != nil {
		return nil, err
	}
	e.lastRead = new(atomic.Int64)
	if cfg.digest {
		e.auth = []byte(cfg.user + ":" + cfg.password)
	}
	ready := make(chan struct{})
	conn, _, err := zk.Connect(servers, cfg.sessionTimeout,
		zk.WithDialer(newGuard(e.lastRead).dial),
		zk.WithLogger(&logSink{e: e, out: cfg.logger}),
		zk.WithEventCallback(func(ev zk.Event) {
			<-ready // e.conn is set
			e.handleEvent(ev)
		}))
	if err != nil {
		return nil, &engine.OpError{Engine: "zookeeper", Op: "dial", Err: err}
	}
	e.conn, e.own = conn, conn
	close(ready)
	_ = e.frame.Go(e.watchReleased)
	return e, nil
}

// New returns an engine on a connection the caller made, typically a
// *zk.Conn from zk.Connect, and the event channel zk.Connect returned with
// it. The engine reads events from the channel (no one else may) to follow
// the session; pass the session timeout with WithSessionTimeout. Close does
// not close conn.
//
// Without a hook into the connection's reads, the engine assumes the server
// was last heard from when go-zookeeper's read deadline (two thirds of the
// session timeout) began, so leases are given up one third of the session
// timeout after a disconnect unless the session is back. Dial has no such
// blind spot.
//
// Make conn with zk.WithDialer(NewDialer()) in a program built with -race:
// go-zookeeper v1.0.4 has a data race on every session that comes back on
// a new TCP connection while it has watches, and the engine always keeps a
// watch on its connection. Dial's connection is guarded already.
func New(conn Conn, events <-chan zk.Event, opts ...Option) (*Engine, error) {
	if conn == nil || events == nil {
		return nil, fmt.Errorf("%w: zookeeper: New needs a connection and its event channel",
			engine.ErrInvalidRequest)
	}
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	e, err := newEngine(cfg)
	if err != nil {
		return nil, err
	}
	e.conn = conn
	if conn.State() == zk.StateHasSession {
		e.sessionUp(conn.SessionID())
	}
	go func() {
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					return
				}
				e.handleEvent(ev)
			case <-e.frame.Closing():
				return
			}
		}
	}()
	_ = e.frame.Go(e.watchReleased)
	return e, nil
}

func newEngine(cfg config) (*Engine, error) {
	for _, p := range []struct{ name, path string }{{"prefix", cfg.base}, {"chroot", cfg.chroot}} {
		if p.path == "" && p.name == "chroot" {
			continue
		}
		if !strings.HasPrefix(p.path, "/") || strings.HasSuffix(p.path, "/") ||
			strings.Contains(p.path, "//") {
			return nil, fmt.Errorf("%w: zookeeper: %s %q must be absolute, without a trailing or doubled "+
				"slash", engine.ErrInvalidRequest, p.name, p.path)
		}
	}
	if cfg.sessionTimeout <= 0 || cfg.recheck <= 0 {
		return nil, fmt.Errorf("%w: zookeeper: session timeout and recheck must be positive",
			engine.ErrInvalidRequest)
	}
	e := &Engine{
		base:      cfg.chroot + cfg.base,
		released:  cfg.chroot + cfg.base + "/" + releasedDir,
		acl:       zk.WorldACL(zk.PermAll),
		recheck:   cfg.recheck,
		requested: cfg.sessionTimeout,
		hooks:     cfg.hooks,
	}
	e.frame.Init(&e.mu)
	if cfg.digest {
		e.acl = append(zk.DigestACL(zk.PermAll, cfg.user, cfg.password), zk.WorldACL(zk.PermRead)...)
	}
	e.sess.ready = make(chan struct{})
	e.sess.lost = make(chan struct{})
	e.sess.down = make(chan struct{})
	return e, nil
}

// logSink learns the negotiated session timeout from go-zookeeper's
// "authenticated" line, which is the only place the library reports it, and
// passes every line on to the configured logger.
type logSink struct {
	e   *Engine
	out zk.Logger
}

func (l *logSink) Printf(format string, args ...any) {
	if format == "authenticated: id=%d, timeout=%d" && len(args) == 2 {
		if ms, ok := args[1].(int32); ok && ms > 0 {
			l.e.negotiated.Store(int64(time.Duration(ms) * time.Millisecond))
		}
	}
	if l.out != nil {
		l.out.Printf(format, args...)
	}
}

// sessionTimeout is the shorter of the requested and negotiated timeouts.
func (e *Engine) sessionTimeout() time.Duration {
	if n := time.Duration(e.negotiated.Load()); n > 0 && n < e.requested {
		return n
	}
	return e.requested
}

// Name returns "zookeeper".
func (e *Engine) Name() string { return "zookeeper" }

// Limits returns the common bounds from package engine. Every key within
// them has a znode name (see EncodeKey). Shorter lease periods than the
// session timeout are accepted and honoured while the holder runs, but a
// holder that stops talking keeps its keys until the server expires its
// session: Floor is the longer of the requested and negotiated timeouts
// times 3/2 (the server expires a session within one tickTime after its
// timeout, and negotiates at least two tickTimes). Counted is true: the
// queue honours Request.Limit (see the package documentation).
func (e *Engine) Limits() engine.Limits {
	lim := engine.Common
	lim.Counted = true
	lim.Floor = max(e.requested, time.Duration(e.negotiated.Load())) * 3 / 2
	return lim
}

// Validate checks req with engine.CheckRequest. Every key CheckKey accepts
// can be escaped into a znode name, so there are no further rules.
func (e *Engine) Validate(req engine.Request) error {
	return engine.CheckRequest(req, e.Limits())
}

// Connected reports whether the engine has a live session with ZooKeeper.
// While it is false, held leases are uncertain: they end with
// engine.ErrLeaseLost unless the session is back within the session timeout.
func (e *Engine) Connected() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sess.up
}

// Ping checks that the server answers a read. It returns engine.ErrClosed
// after Close and an *engine.OpError wrapping engine.ErrUnavailable when the
// server does not answer within the session timeout; if ctx ends first,
// the error wraps ctx.Err() instead.
func (e *Engine) Ping(ctx context.Context) error {
	if e.frame.Closed() {
		return engine.ErrClosed
	}
	bctx, cancel := e.bound(ctx)
	defer cancel()
	err := call(bctx, func() error { _, _, err := e.conn.Exists("/"); return err })
	if err != nil {
		return e.opError(ctx, "ping", "", err)
	}
	return nil
}

// bound limits a call made for a caller to the session timeout, within
// ctx: a server that does not answer in it is unavailable (the session is
// as good as lost), and no call waits for it forever.
func (e *Engine) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.sessionTimeout())
}

// Close releases every lease the engine holds (deleting their nodes, within
// the session timeout), ends them with engine.ErrClosed, makes waiting
// Acquire calls return engine.ErrClosed after removing their queue nodes,
// and closes the connection if Dial made it. A connection passed to New
// stays open. Close is idempotent.
func (e *Engine) Close() error {
	held, first := e.frame.Shut()
	if !first {
		return nil
	}
	bound := e.sessionTimeout()
	e.frame.WaitCallsUpTo(bound)
	// Each holder is told before its node goes, so that its Done has
	// closed before a waiter can be granted the key.
	kit.ReleaseAll(held, bound, func(ctx context.Context, l *lease) {
		ended := l.markEnded()
		l.Signal.Close(fmt.Errorf("%w: zookeeper engine closed", engine.ErrClosed))
		if ended {
			_ = e.removeNode(ctx, l.path)
		}
	})
	e.frame.WaitUpTo(bound)
	if e.own != nil {
		e.own.Close()
	}
	return nil
}

// call runs f, one blocking go-zookeeper call, and returns its error, or
// ctx's error if ctx ends first. go-zookeeper calls take no context; an
// abandoned call finishes in the background and its results are dropped.
func call(ctx context.Context, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// connErr reports whether err says the server or the session could not be
// reached, so that the outcome of a write is unknown.
func connErr(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved) ||
		errors.Is(err, zk.ErrClosing) || errors.Is(err, errNoSession)
}

var errNoSession = errors.New("zookeeper: no session")

// opError wraps a server failure of a call made for a caller whose
// context is ctx, classified by engine.Classify: ZooKeeper's NOAUTH and
// AUTHFAILED are engine.ErrAccessDenied; connection and session failures,
// and the engine's own deadlines, are engine.ErrUnavailable.
func (e *Engine) opError(ctx context.Context, op, key string, err error) error {
	return &engine.OpError{Engine: "zookeeper", Op: op, Key: key,
		Err: engine.Classify(ctx, err, denied, connErr)}
}

// denied reports a refusal by ZooKeeper's ACLs or authentication.
func denied(err error) bool {
	return errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrAuthFailed)
}

package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// Strategy is how the engine holds locks: StrategyLease, StrategyRow or
// StrategySession.
type Strategy string

// The strategies WithStrategy accepts.
const (
	// StrategyLease keeps each lock as a lease row with an owner, a version
	// and an expiry computed by the server. It is the default.
	StrategyLease Strategy = "lease"
	// StrategyRow holds each lock as an InnoDB row lock (SELECT ... FOR
	// UPDATE or LOCK IN SHARE MODE) inside a transaction on a pinned
	// connection, until Release ends the transaction.
	StrategyRow Strategy = "row"
	// StrategySession holds each lock as a named lock of the server
	// (GET_LOCK), on a connection shared with other leases
	// (WithSessionConns) or, for a request that waited, pinned for it,
	// until Release runs RELEASE_LOCK.
	// It grants exclusive leases only: shared and counted requests are
	// refused by Validate (Limits().ExclusiveOnly).
	StrategySession Strategy = "session"
)

// DefaultTable is the lock table's name unless WithTable says otherwise.
const DefaultTable = "cerberus_locks"

// MaxKeyLen is the longest key the lock table stores: the size, in bytes,
// of its VARBINARY key column. It equals engine.MaxKeyLen.
const MaxKeyLen = engine.MaxKeyLen

// Defaults of the options.
const (
	DefaultMinBackoff = 5 * time.Millisecond
	DefaultMaxBackoff = 200 * time.Millisecond
	DefaultConnCheck  = 250 * time.Millisecond
	DefaultOpTimeout  = 10 * time.Second
)

// name is what Name returns and what OpError.Engine holds.
const name = "mysql"

// Option configures an Engine.
type Option func(*config)

type config struct {
	table      string
	strategy   Strategy
	minBackoff time.Duration
	maxBackoff time.Duration
	connCheck  time.Duration
	opTimeout  time.Duration
	maxConns   int
	muxConns   int
	records    bool // the session strategy's rows in "<table>_names"
}

// DefaultMaxConns is the default of WithMaxConns.
const DefaultMaxConns = 50

// DefaultSessionConns is the default of WithSessionConns.
const DefaultSessionConns = 2

// WithSessionConns sets how many connections the session strategy shares
// among its uncontended leases: a grant that GET_LOCK(name, 0) answers at
// once holds its lock name on one of these n sessions, which carry any
// number of names each, so that thousands of leases cost n connections.
// A waiting request whose key is held waits on a connection pinned for it
// (see the package documentation). Each shared connection takes one of
// the WithMaxConns budget for as long as the engine lives, so n must be
// at least 1 and the max conns at least n+3. The default is
// DefaultSessionConns (2). With Open they are a pool of their own, whose
// socket reads and writes are bounded by one to one and a half
// WithOpTimeout (so that their statements need no context that can end,
// which the driver would watch with a goroutine each time), and Open's
// main pool gets the rest of the budget. Other strategies ignore it.
func WithSessionConns(n int) Option { return func(c *config) { c.muxConns = n } }

// WithHolderRecords says whether the session strategy writes each grant's
// row in "<table>_names" (the lock name's token counter and its holder) in
// the statement that takes the lock. With records (the default, true)
// Holders, List and ForceRelease see every session lease, and a token
// rests on the name's counter, with the server's clock as the floor after
// a lost counter. WithHolderRecords(false) makes every grant GET_LOCK and
// a read of the server's clock in one SELECT that writes nothing, so that
// a lease costs what a bare GET_LOCK and RELEASE_LOCK cost; its token is
// the server's clock alone, which rests on a stronger assumption (see the
// package documentation, "Tokens without records"), and Holders, List and
// ForceRelease return an error wrapping errors.ErrUnsupported. Every
// process that locks a key must use the same setting. The other
// strategies ignore it.
func WithHolderRecords(on bool) Option { return func(c *config) { c.records = on } }

// clockGuard is how long the engine waits before it drops a connection,
// which frees its lock names, without holder records (kit.ClockGuard);
// tests raise it to see it.
var clockGuard = kit.ClockGuard

// HolderRecords reports whether the session strategy records its holders
// (WithHolderRecords).
func (e *Engine) HolderRecords() bool { return e.cfg.records }

// noRecords reports whether the engine is a session engine without holder
// records.
func (e *Engine) noRecords() bool { return e.cfg.strategy == StrategySession && !e.cfg.records }

// errNoRecords is the error of Holders, List and ForceRelease on a session
// engine without holder records.
func (e *Engine) errNoRecords(op string) error {
	return fmt.Errorf("mysql: %s: the session strategy keeps no holder records "+
		"(WithHolderRecords(false)): %w", op, errors.ErrUnsupported)
}

// WithMaxConns bounds the connections the engine uses. Open caps its own
// pool at n (with the session strategy, its two pools together: see
// WithSessionConns). The row strategy pins one connection per held or waiting lock,
// so it pins at most n-2, leaving two for KILL QUERY, renewals and
// releases; further row acquisitions wait (cancellably) for a connection to
// come free instead of exhausting the server's max_connections. The
// session strategy's shared connections (WithSessionConns) and the
// connections pinned for its waiting requests count among those n-2. With New,
// size the caller's pool to at least n. It must be at least 3. The default
// is DefaultMaxConns (50).
func WithMaxConns(n int) Option { return func(c *config) { c.maxConns = n } }

// WithTable sets the lock table's name. The row strategy and shared leases
// also use the tables "<name>_fences" and "<name>_readers". The name must be
// 1 to 48 ASCII letters, digits or underscores; New refuses anything else
// before any I/O. The default is DefaultTable.
func WithTable(table string) Option { return func(c *config) { c.table = table } }

// WithStrategy picks how locks are held: StrategyLease, StrategyRow or
// StrategySession. New refuses any other name before any I/O. The default
// is StrategyLease.
func WithStrategy(s Strategy) Option { return func(c *config) { c.strategy = s } }

// WithBackoff sets the polling delays of a waiting lease-strategy
// Acquire. The head of the key's queue re-tries its grant after min/2
// (at least 500µs) eight times, then after twice the previous delay,
// capped at max, with jitter in [d/2, d]; a waiter further back reads its place after
// min for each place between it and the second (at most a quarter of a
// ticket's life). A waiter's ticket lives
// four times max (at least 2s) between refreshes, which bounds how long a
// crashed waiter holds the queue up. The default is DefaultMinBackoff to
// DefaultMaxBackoff. The row strategy does not poll: its waiters queue
// inside InnoDB.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) { c.minBackoff, c.maxBackoff = min, max }
}

// WithConnCheck sets how often a row or session lease's connection is
// pinged (a session lease's, and a shared session connection's, at least
// three times a lease period) to notice that it was lost (killed, server
// restart, network) and, on a shared connection, to read force releases.
// The default is DefaultConnCheck.
func WithConnCheck(d time.Duration) Option { return func(c *config) { c.connCheck = d } }

// WithOpTimeout bounds each single statement the engine sends that does not
// wait for a lock (grants, releases, renewals), and Ping. The default is
// DefaultOpTimeout.
func WithOpTimeout(d time.Duration) Option { return func(c *config) { c.opTimeout = d } }

// Engine is an engine.Engine on a MySQL or MariaDB server. It is safe for
// concurrent use.
type Engine struct {
	cfg   config
	db    *sql.DB
	owned bool // Close closes db
	q     queries
	// muxDB, when Open made the engine for the session strategy, is the
	// pool of its shared session connections, whose sockets bound every
	// read and write by the op timeout (boundDial): their statements
	// then need no context that can end, which go-sql-driver would hand
	// to a watcher goroutine and back for each statement (see muxConn).
	// nil otherwise: New's shared connections come from the caller's
	// pool, bounded by a context each.
	muxDB *sql.DB

	// core is the lease strategy and the frame, shared with the
	// PostgreSQL engine; frame and mu are its Frame and Mu. frame keeps
	// the leases of either strategy (the core's or *rowLease), the calls
	// in progress, and the clean-ups, renewal loop and connection
	// watchers that Close waits for.
	core  *sqlcore.Core
	frame *kit.Base[engine.Lease]
	mu    *sync.Mutex // guards frame and idle
	idle  []*rowConn
	pins  chan struct{} // one token per pinned row connection

	hot hotNames // the session strategy's recently contended lock names

	mux *sqlcore.Mux[string] // the session strategy's shared connections
}

var (
	_ engine.Engine          = (*Engine)(nil)
	_ engine.RenewalReporter = (*Engine)(nil)
)

// Pool is what New needs from the caller's database handle: its *sql.DB.
// A *gorm.DB is a Pool, and so is anything else with that method.
type Pool interface {
	DB() (*sql.DB, error)
}

// New returns an engine on db, typically the application's *gorm.DB, which
// the caller keeps: Close leaves it open. The engine sends its statements
// straight to db's *sql.DB, which saves gorm's callback chain on every lock
// operation. A row-strategy lease pins one of the pool's connections for as
// long as it is held, so the pool must allow one open connection per held
// row lease plus one. New does no I/O: it validates the options and returns
// an error wrapping engine.ErrInvalidRequest for a bad table name or an
// unknown strategy. Call Migrate once to create the tables. With
// interpolateParams=true in the pool's DSN (as Open sets) each statement
// takes one round trip instead of two.
func New(db Pool, opts ...Option) (*Engine, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("%w: mysql: nil database handle", engine.ErrInvalidRequest)
	}
	sqlDB, err := db.DB()
	if err != nil || sqlDB == nil {
		return nil, fmt.Errorf("%w: mysql: the handle has no *sql.DB: %v", engine.ErrInvalidRequest, err)
	}
	return newEngine(cfg, sqlDB, false), nil
}

// Open returns an engine with a connection pool of its own on the server
// named by dsn, a go-sql-driver/mysql DSN. Open does no I/O; Close closes the
// pool. Open turns on the driver's interpolateParams, which saves a round
// trip per statement, and parseTime. Errors never contain the DSN.
func Open(dsn string, opts ...Option) (*Engine, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	dc, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		// The driver's parse errors name the problem, not the DSN; strip
		// it anyway in case a future version quotes it.
		return nil, badDSN(err, dsn)
	}
	dc.InterpolateParams = true
	dc.ParseTime = true
	conn, err := mysqldrv.NewConnector(dc)
	if err != nil {
		return nil, badDSN(err, dsn)
	}
	sqlDB := sql.OpenDB(conn)
	sqlDB.SetMaxIdleConns(8)
	if cfg.strategy != StrategySession {
		sqlDB.SetMaxOpenConns(cfg.maxConns)
		return newEngine(cfg, sqlDB, true), nil
	}
	// The shared session connections count among WithMaxConns.
	sqlDB.SetMaxOpenConns(cfg.maxConns - cfg.muxConns)
	mc := dc.Clone()
	if dial := boundDial(dc, cfg.opTimeout); dial != nil {
		mc.DialFunc, mc.ReadTimeout, mc.WriteTimeout = dial, 0, 0 // the socket bounds them
	} else {
		mc.ReadTimeout, mc.WriteTimeout = cfg.opTimeout, cfg.opTimeout
	}
	mconn, err := mysqldrv.NewConnector(mc)
	if err != nil {
		_ = sqlDB.Close()
		return nil, badDSN(err, dsn)
	}
	e := newEngine(cfg, sqlDB, true)
	e.muxDB = sql.OpenDB(mconn)
	e.muxDB.SetMaxOpenConns(cfg.muxConns)
	e.muxDB.SetMaxIdleConns(cfg.muxConns)
	return e, nil
}

// badDSN is Open's error for a DSN the driver refuses, without the DSN.
func badDSN(err error, dsn string) error {
	return fmt.Errorf("%w: mysql: bad DSN: %s", engine.ErrInvalidRequest, redact(err.Error(), dsn))
}

func redact(msg, secret string) string {
	if secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, secret, "<dsn>")
}

func buildConfig(opts []Option) (config, error) {
	cfg := config{
		table: DefaultTable, strategy: StrategyLease,
		minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff,
		connCheck: DefaultConnCheck, opTimeout: DefaultOpTimeout,
		maxConns: DefaultMaxConns, muxConns: DefaultSessionConns, records: true,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkTable(cfg.table); err != nil {
		return cfg, err
	}
	switch cfg.strategy {
	case StrategyLease, StrategyRow, StrategySession:
	default:
		return cfg, fmt.Errorf("%w: mysql: unknown strategy %q (want %q, %q or %q)", engine.ErrInvalidRequest,
			cfg.strategy, StrategyLease, StrategyRow, StrategySession)
	}
	if cfg.minBackoff <= 0 || cfg.maxBackoff < cfg.minBackoff {
		return cfg, fmt.Errorf("%w: mysql: backoff %v..%v", engine.ErrInvalidRequest, cfg.minBackoff,
			cfg.maxBackoff)
	}
	if cfg.maxConns < 3 {
		return cfg, fmt.Errorf("%w: mysql: max conns %d is under 3", engine.ErrInvalidRequest,
			cfg.maxConns)
	}
	if cfg.strategy == StrategySession && (cfg.muxConns < 1 || cfg.maxConns < cfg.muxConns+3) {
		return cfg, fmt.Errorf("%w: mysql: session conns %d with max conns %d (want at least 1, and max conns at least session conns + 3)",
			engine.ErrInvalidRequest, cfg.muxConns, cfg.maxConns)
	}
	if cfg.connCheck <= 0 || cfg.opTimeout <= 0 {
		return cfg, fmt.Errorf("%w: mysql: conn check and op timeout must be positive",
			engine.ErrInvalidRequest)
	}
	return cfg, nil
}

func newEngine(cfg config, db *sql.DB, owned bool) *Engine {
	e := &Engine{
		cfg: cfg, db: db, owned: owned, q: buildQueries(cfg.table, cfg.records),
		pins: make(chan struct{}, cfg.maxConns-2),
	}
	e.core = sqlcore.New(sqlcore.Config{Name: name, OpTimeout: cfg.opTimeout,
		MinBackoff: cfg.minBackoff, MaxBackoff: cfg.maxBackoff,
		Renew: cfg.strategy == StrategyLease}, leaseSQL{e})
	e.frame, e.mu = &e.core.Frame, &e.core.Mu
	e.mux = sqlcore.NewMux(e.frame, sqlcore.MuxDriver[string](muxDriver{e}),
		sqlcore.MuxConfig{Conns: cfg.muxConns, MaxPing: cfg.connCheck})
	return e
}

// Name returns "mysql".
func (e *Engine) Name() string { return name }

// Strategy returns StrategyLease, StrategyRow or StrategySession.
func (e *Engine) Strategy() Strategy { return e.cfg.strategy }

// Table returns the lock table's name.
func (e *Engine) Table() string { return e.cfg.table }

// Limits returns the common bounds: keys up to MaxKeyLen bytes, TTLs from
// engine.MinTTL to engine.MaxTTL. The lease strategy counts
// (Request.Limit); the row strategy does not (see the package
// documentation); the session strategy grants exclusive leases only.
func (e *Engine) Limits() engine.Limits {
	lim := engine.Limits{MaxKeyLen: MaxKeyLen, MinTTL: engine.MinTTL, MaxTTL: engine.MaxTTL,
		Counted: e.cfg.strategy == StrategyLease, ExclusiveOnly: e.cfg.strategy == StrategySession}
	if e.cfg.strategy != StrategyLease {
		// A silent holder's session ends after its wait_timeout: the
		// period in whole seconds, at least one, plus one (idleTimeout).
		lim.Floor = 2 * time.Second
	}
	return lim
}

// Validate checks req with engine.CheckRequest, without I/O.
func (e *Engine) Validate(req engine.Request) error {
	return engine.CheckRequest(req, e.Limits())
}

// Ping checks that the server answers within ctx and the statement
// timeout (WithOpTimeout); a server that does not is
// engine.ErrUnavailable. It returns engine.ErrClosed after Close.
func (e *Engine) Ping(ctx context.Context) error {
	return e.core.Ping(ctx, e.db.PingContext)
}

// Acquire grants a lease with the engine's strategy; see engine.Engine.
// A waiting lease Acquire polls (see the package documentation); a waiting
// row Acquire queues inside InnoDB; a waiting session Acquire waits inside
// GET_LOCK.
func (e *Engine) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := e.frame.Enter(ctx, e.Validate(req)); err != nil {
		return nil, err
	}
	defer e.frame.Exit()
	switch e.cfg.strategy {
	case StrategyRow:
		return e.acquireRow(ctx, req)
	case StrategySession:
		return e.acquireSession(ctx, req)
	}
	return e.core.AcquireLease(ctx, req)
}

// Close releases every lease the engine holds (each release bounded by the
// op timeout), ends them with engine.ErrClosed, makes waiters return
// engine.ErrClosed and stops the renewal loop. A pool from Open is closed;
// a *gorm.DB passed to New stays open. Close is idempotent.
func (e *Engine) Close() error {
	endRow := func(l engine.Lease) {
		switch l := l.(type) {
		case *rowLease:
			l.end(engine.ErrClosed)
		case *sessionLease:
			l.end(engine.ErrClosed)
		case *muxLease:
			// Told here; the mux's Close frees the names of every lease
			// of a shared connection at once, by closing it.
			l.Tell(engine.ErrClosed)
		}
	}
	if !e.core.Close(endRow) {
		return nil
	}
	e.mux.Close()
	e.mu.Lock()
	idle := e.idle
	e.idle = nil
	e.mu.Unlock()
	for _, c := range idle {
		e.discard(c)
	}
	if e.muxDB != nil {
		_ = e.muxDB.Close()
	}
	if e.owned {
		return e.db.Close()
	}
	return nil
}

// MySQL and MariaDB error numbers the engine acts on.
const (
	errLockWaitTimeout = 1205 // innodb_lock_wait_timeout; MariaDB's NOWAIT
	errDeadlock        = 1213
	errInterrupted     = 1317 // KILL QUERY
	errLockNowait      = 3572 // MySQL 8's NOWAIT
)

func errNumber(err error) uint16 {
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// RenewalSlack implements engine.RenewalReporter for the lease strategy:
// the room the last renewal round left the lease with the least of it.
// The other strategies renew nothing in rounds, and report ok false.
func (e *Engine) RenewalSlack() (time.Duration, bool) { return e.core.RenewalSlack() }

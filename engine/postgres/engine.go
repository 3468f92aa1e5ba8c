package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/internal/sqlcore"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// Strategy is how the engine holds locks: StrategySession or StrategyLease.
type Strategy string

// The strategies WithStrategy accepts.
const (
	// StrategySession holds each lock as a PostgreSQL session-level
	// advisory lock (pg_advisory_lock, pg_advisory_lock_shared): on one of
	// a few connections shared by every lease granted at once
	// (WithSessionConns), or, for a lease that waited for its key, on a
	// connection pinned out of the pool for as long as it lives. Waiters
	// queue inside the server. It is the default.
	StrategySession Strategy = "session"
	// StrategyLease keeps each lock as a lease row with an owner, a version
	// and an expiry computed by the server. Every statement stands alone,
	// so it works behind PgBouncer in transaction mode, and it counts
	// (Request.Limit).
	StrategyLease Strategy = "lease"
)

// DefaultTable is the lock table's name unless WithTable says otherwise.
const DefaultTable = "cerberus_locks"

// MaxKeyLen is the longest key the engine accepts, in bytes. It equals
// engine.MaxKeyLen.
const MaxKeyLen = engine.MaxKeyLen

// Defaults of the options.
const (
	DefaultMinBackoff = 5 * time.Millisecond
	DefaultMaxBackoff = 200 * time.Millisecond
	DefaultOpTimeout  = 10 * time.Second
	DefaultMaxConns   = 20
	// DefaultSessionConns is the default of WithSessionConns.
	DefaultSessionConns = 2
)

// name is what Name returns and what OpError.Engine holds.
const name = "postgres"

// Option configures an Engine.
type Option func(*config)

type config struct {
	table      string
	strategy   Strategy
	minBackoff time.Duration
	maxBackoff time.Duration
	opTimeout  time.Duration
	maxConns   int
	muxConns   int
	records    bool                   // the session strategy's holder records and token counter
	hash       func(key string) int64 // tests only: the advisory lock key of a lock key
}

// WithTable sets the lock table's name. The engine also uses the tables
// "<name>_readers", "<name>_queue" and "<name>_released" (lease
// strategy), "<name>_fences", "<name>_held" and "<name>_revoked" (session
// strategy). The name must be 1 to 48 ASCII letters, digits or
// underscores, starting with a letter or an underscore; Open and New refuse
// anything else before any I/O. The default is DefaultTable.
func WithTable(table string) Option { return func(c *config) { c.table = table } }

// WithStrategy picks how locks are held: StrategySession or StrategyLease.
// Open and New refuse any other name before any I/O. The default is
// StrategySession.
func WithStrategy(s Strategy) Option { return func(c *config) { c.strategy = s } }

// WithMaxConns caps the pool that Open makes at n connections. The
// session strategy keeps WithSessionConns of them for the leases it grants
// at once, and one for Holders, Ping and Migrate; a session lease that had
// to wait for its key pins one of the others while it waits and while it
// is held, and further waits wait, cancellably, for a connection to come
// free. New ignores it: the caller's pool decides. n must be at least the
// session connections plus 2. The default is DefaultMaxConns (20).
func WithMaxConns(n int) Option { return func(c *config) { c.maxConns = n } }

// WithSessionConns sets how many connections the session strategy shares
// among its leases: each holds the advisory locks of any number of
// uncontended session leases (one per key), so that an engine holds tens
// of thousands of leases over n connections; see the package
// documentation. n must be at least 1, and the pool's size (WithMaxConns,
// or the MaxConns of New's pool) at least n+2. The default is
// DefaultSessionConns (2).
func WithSessionConns(n int) Option { return func(c *config) { c.muxConns = n } }

// WithHolderRecords says whether the session strategy writes a record of
// each holder (key, mode, token, value) and keeps each key's token counter
// in the statement that takes the lock. With records (the default, true)
// Holders, List and ForceRelease see every session lease, and a token
// rests on the key's counter, with the server's clock only as the floor
// after a lost counter. WithHolderRecords(false) makes every grant the
// lock and a read of the server's clock in one statement that writes
// nothing, so that a lease costs what a bare pg_advisory_lock and
// pg_advisory_unlock cost; its token is the server's clock alone, which
// rests on a stronger assumption (see the package documentation, "Tokens
// without records"), and Holders, List and ForceRelease return an error
// wrapping errors.ErrUnsupported. Every process that locks a key must use
// the same setting as well as the same table and strategy: a grant with
// records may take a token a tick above the clock, which a grant without
// them would not see. The lease strategy ignores it.
func WithHolderRecords(on bool) Option { return func(c *config) { c.records = on } }

// WithOpTimeout bounds each statement the engine sends that does not wait
// for a lock (grants of the lease strategy, releases, renewals, the ping
// that confirms a late session grant), the connection of a new session to
// the server, and Ping. The default is DefaultOpTimeout (10s).
func WithOpTimeout(d time.Duration) Option { return func(c *config) { c.opTimeout = d } }

// WithBackoff sets the polling delays of a waiting lease-strategy
// Acquire. The head of the key's queue re-tries its grant after min/2
// (at least 500µs) eight times, then after twice the previous delay,
// capped at max, with jitter in [d/2, d]; a waiter further back reads its place after
// min for each place between it and the second (at most a quarter of a
// ticket's life). A waiter's ticket lives
// four times max (at least 2s) between refreshes, which bounds how long a
// crashed waiter holds the queue up. The default is DefaultMinBackoff to
// DefaultMaxBackoff. The session strategy does not poll: its waiters queue
// inside the server.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) { c.minBackoff, c.maxBackoff = min, max }
}

// withHash replaces the advisory lock key of the session strategy; tests
// use it to make keys collide.
func withHash(h func(key string) int64) Option { return func(c *config) { c.hash = h } }

// Engine is an engine.Engine on a PostgreSQL server (14 or later for the
// session strategy). It is safe for concurrent use.
type Engine struct {
	cfg   config
	pool  *pgxpool.Pool
	owned bool // Close closes pool
	q     queries

	// core is the lease strategy and the frame, shared with the MySQL
	// engine; frame is its Frame, which keeps the leases of either
	// strategy (the core's or *sessionLease), the calls in progress, and
	// the clean-ups, renewal loop and pingers that Close waits for.
	core  *sqlcore.Core
	frame *kit.Base[engine.Lease]
	pins  chan struct{} // one token per pinned session connection

	// mux is the session strategy's shared connections, WithSessionConns
	// of them, each connected when first needed.
	mux *sqlcore.Mux[int64]
	// hot holds the keys refused to a waiting Acquire lately, with the
	// time: see contended.
	hot   map[int64]time.Time
	hotMu sync.Mutex
}

var (
	_ engine.Engine          = (*Engine)(nil)
	_ engine.RenewalReporter = (*Engine)(nil)
)

// Open returns an engine with a connection pool of its own on the server
// named by dsn, a libpq connection string or URL as pgxpool.ParseConfig
// reads it, such as "postgres://app@db.internal:5432/app". Open does no I/O; Close closes the
// pool. It returns an error wrapping engine.ErrInvalidRequest for a DSN it
// cannot parse, a bad table name or an unknown strategy; errors never
// contain the DSN or its password.
func Open(dsn string, opts ...Option) (*Engine, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := checkConns(cfg); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors quote the connection string, with the
		// password masked as far as it can tell; a malformed string can
		// defeat that, so none of it is repeated.
		return nil, fmt.Errorf("%w: postgres: the DSN cannot be parsed (its text is not repeated: it "+
			"may hold a password)", engine.ErrInvalidRequest)
	}
	pc.MaxConns = int32(cfg.maxConns)
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > cfg.opTimeout {
		pc.ConnConfig.ConnectTimeout = cfg.opTimeout
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: pool: %s", engine.ErrInvalidRequest, redact(err, pc))
	}
	return newEngine(cfg, pool, true), nil
}

// New returns an engine on pool, which the caller keeps: Close leaves it
// open. A session lease pins one of the pool's connections while it waits
// and while it is held, and the engine pins at most the pool's MaxConns-1
// at once. New does no I/O: it returns an error wrapping
// engine.ErrInvalidRequest for a nil pool, a bad table name or an unknown
// strategy. Call Migrate once to create the tables.
func New(pool *pgxpool.Pool, opts ...Option) (*Engine, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres: nil pool", engine.ErrInvalidRequest)
	}
	cfg.maxConns = int(pool.Config().MaxConns)
	if err := checkConns(cfg); err != nil {
		return nil, err
	}
	return newEngine(cfg, pool, false), nil
}

// checkConns refuses a pool too small for the session connections plus
// one pinned and one kept back, and fewer than one session connection.
func checkConns(cfg config) error {
	if cfg.muxConns < 1 {
		return fmt.Errorf("%w: postgres: session conns %d is under 1", engine.ErrInvalidRequest, cfg.muxConns)
	}
	if cfg.maxConns < cfg.muxConns+2 {
		return fmt.Errorf("%w: postgres: max conns %d is under the %d session conns plus 2",
			engine.ErrInvalidRequest, cfg.maxConns, cfg.muxConns)
	}
	return nil
}

// redact returns err's text without the password of pc, should pgx ever
// quote it.
func redact(err error, pc *pgxpool.Config) string {
	msg := err.Error()
	if pw := pc.ConnConfig.Password; pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}

func buildConfig(opts []Option) (config, error) {
	cfg := config{
		table: DefaultTable, strategy: StrategySession,
		minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff,
		opTimeout: DefaultOpTimeout, maxConns: DefaultMaxConns, muxConns: DefaultSessionConns,
		records: true,
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := checkTable(cfg.table); err != nil {
		return cfg, err
	}
	switch cfg.strategy {
	case StrategySession, StrategyLease:
	default:
		return cfg, fmt.Errorf("%w: postgres: unknown strategy %q (want %q or %q)", engine.ErrInvalidRequest,
			cfg.strategy, StrategySession, StrategyLease)
	}
	if cfg.minBackoff <= 0 || cfg.maxBackoff < cfg.minBackoff {
		return cfg, fmt.Errorf("%w: postgres: backoff %v..%v", engine.ErrInvalidRequest, cfg.minBackoff,
			cfg.maxBackoff)
	}
	if cfg.opTimeout <= 0 {
		return cfg, fmt.Errorf("%w: postgres: the op timeout must be positive", engine.ErrInvalidRequest)
	}
	if cfg.hash == nil {
		table := cfg.table
		cfg.hash = func(key string) int64 { return keyHash(table, key) }
	}
	return cfg, nil
}

// keyHash is the advisory lock key of the session strategy for key under
// table: the first 8 bytes of SHA-256(table + "\x00" + key), read as a
// big-endian int64. Engines on different tables do not contend; two keys
// of one table with the same hash serialize each other (see the package
// documentation).
func keyHash(table, key string) int64 {
	h := sha256.New()
	h.Write([]byte(table))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return int64(binary.BigEndian.Uint64(h.Sum(sum[:0])[:8]))
}

func newEngine(cfg config, pool *pgxpool.Pool, owned bool) *Engine {
	e := &Engine{
		cfg: cfg, pool: pool, owned: owned, q: buildQueries(cfg.table, cfg.records),
		pins: make(chan struct{}, max(1, cfg.maxConns-1-cfg.muxConns)),
		hot:  map[int64]time.Time{},
	}
	e.core = sqlcore.New(sqlcore.Config{Name: name, OpTimeout: cfg.opTimeout,
		MinBackoff: cfg.minBackoff, MaxBackoff: cfg.maxBackoff,
		Renew: cfg.strategy == StrategyLease}, leaseSQL{e})
	e.frame = &e.core.Frame
	e.mux = sqlcore.NewMux(e.frame, sqlcore.MuxDriver[int64](muxDriver{e}), sqlcore.MuxConfig{Conns: cfg.muxConns})
	return e
}

// Name returns "postgres".
func (e *Engine) Name() string { return name }

// Strategy returns StrategySession or StrategyLease.
func (e *Engine) Strategy() Strategy { return e.cfg.strategy }

// HolderRecords reports whether the session strategy records its holders
// (WithHolderRecords).
func (e *Engine) HolderRecords() bool { return e.cfg.records }

// errNoRecords is the error of Holders, List and ForceRelease on a session
// engine without holder records.
func (e *Engine) errNoRecords(op string) error {
	return fmt.Errorf("postgres: %s: the session strategy keeps no holder records "+
		"(WithHolderRecords(false)): %w", op, errors.ErrUnsupported)
}

// noRecords reports whether the engine is a session engine without holder
// records.
func (e *Engine) noRecords() bool { return e.cfg.strategy == StrategySession && !e.cfg.records }

// Table returns the lock table's name.
func (e *Engine) Table() string { return e.cfg.table }

// Limits returns the common bounds: keys up to MaxKeyLen bytes, TTLs from
// engine.MinTTL to engine.MaxTTL, and no Floor (the server cuts a silent
// session holder off at its own lease period). The lease strategy counts
// (Request.Limit); the session strategy does not.
func (e *Engine) Limits() engine.Limits {
	return engine.Limits{MaxKeyLen: MaxKeyLen, MinTTL: engine.MinTTL, MaxTTL: engine.MaxTTL,
		Counted: e.cfg.strategy == StrategyLease}
}

// Validate checks req with engine.CheckRequest, without I/O.
func (e *Engine) Validate(req engine.Request) error {
	return engine.CheckRequest(req, e.Limits())
}

// Ping checks that the server answers within ctx and the op timeout
// (WithOpTimeout); a server that does not is engine.ErrUnavailable, and a
// login refused by access control engine.ErrAccessDenied. It returns
// engine.ErrClosed after Close.
func (e *Engine) Ping(ctx context.Context) error {
	return e.core.Ping(ctx, e.pool.Ping)
}

// Acquire grants a lease with the engine's strategy; see engine.Engine. A
// waiting session Acquire queues inside the server; a waiting lease
// Acquire polls (see the package documentation).
func (e *Engine) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := e.frame.Enter(ctx, e.Validate(req)); err != nil {
		return nil, err
	}
	defer e.frame.Exit()
	if e.cfg.strategy == StrategySession {
		return e.acquireSession(ctx, req)
	}
	return e.core.AcquireLease(ctx, req)
}

// Close releases every lease the engine holds (each release bounded by the
// op timeout), ends them with engine.ErrClosed, makes waiters return
// engine.ErrClosed and stops the engine's goroutines. A pool from Open is
// closed; a pool passed to New stays open. Close is idempotent.
func (e *Engine) Close() error {
	endSession := func(l engine.Lease) {
		switch l := l.(type) {
		case *sessionLease:
			l.end(engine.ErrClosed)
		case *muxLease:
			// Told here; the mux's Close frees the locks of every lease
			// of a shared connection at once, by closing it.
			l.Tell(engine.ErrClosed)
		}
	}
	if !e.core.Close(endSession) {
		return nil
	}
	e.mux.Close()
	if e.owned {
		e.pool.Close()
	}
	return nil
}

// sqlState returns the SQLSTATE of a server error, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// RenewalSlack implements engine.RenewalReporter for the lease strategy:
// the room the last renewal round left the lease with the least of it.
// The other strategies renew nothing in rounds, and report ok false.
func (e *Engine) RenewalSlack() (time.Duration, bool) { return e.core.RenewalSlack() }

package config

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/engine/etcd"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/engine/postgres"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
)

// Named is a built engine and the name the configuration gave it.
type Named struct {
	// Name is Engine.Name from the configuration, such as "primary".
	Name string
	// Engine is the running engine. Closing it also closes the clients
	// Build made for it.
	Engine engine.Engine
}

// Build constructs every configured engine, in order, with one switch from
// kind to constructor. It does no I/O except for mysql and postgres
// engines, whose tables it creates (Migrate) with ctx; an engine whose server is down is
// built all the same and fails its Ping.
//
// Each returned Engine owns what Build made for it: its Close also closes
// the go-redis clients, ZooKeeper connection or MySQL or PostgreSQL pool
// behind it. The
// go-redis clients name their connections "cerberus-<name>" (CLIENT
// SETNAME) so that operators can find them in CLIENT LIST. On error Build
// closes the engines it already built and returns an error that names the
// failing engine ("engines[i] (name): ...") and no secret.
func (c *Config) Build(ctx context.Context) ([]Named, error) {
	var built []Named
	for i := range c.Engines {
		e := &c.Engines[i]
		eng, err := e.build(ctx)
		if err != nil {
			for _, n := range built {
				_ = n.Engine.Close()
			}
			return nil, buildError(i, e, err)
		}
		built = append(built, Named{Name: e.Name, Engine: eng})
	}
	return built, nil
}

// build is the one switch from kind to constructor.
func (e *EngineSpec) build(ctx context.Context) (engine.Engine, error) {
	switch e.Kind {
	case KindMemory:
		return memory.New(), nil
	case KindRedis, KindRedisCluster, KindRedlock:
		return e.buildRedis()
	case KindZooKeeper:
		return e.buildZooKeeper()
	case KindConsul:
		return e.buildConsul()
	case KindMySQL:
		return e.buildMySQL(ctx)
	case KindEtcd:
		return e.buildEtcd()
	case KindPostgres:
		return e.buildPostgres(ctx)
	}
	// validate refuses unknown kinds; a Config built by hand may still
	// hold one.
	return nil, fmt.Errorf("%w: unknown kind %q (want one of %s)", ErrInvalid, e.Kind,
		strings.Join(Kinds, ", "))
}

// buildRedis builds a redis, redis-cluster or redlock engine over go-redis
// clients of its own.
func (e *EngineSpec) buildRedis() (engine.Engine, error) {
	var tlsConfig *tls.Config
	if e.TLS != nil {
		var err error
		if tlsConfig, err = e.TLS.clientConfig(); err != nil {
			return nil, err
		}
	}
	switch e.Kind {
	case KindRedisCluster:
		client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: e.Addrs, Username: e.Username,
			Password: e.password, PoolSize: e.MaxConns, ClientName: e.clientName(), TLSConfig: tlsConfig, ContextTimeoutEnabled: true})
		eng, err := redis.New(client, e.redisOptions()...)
		return own(eng, err, client.Close)
	case KindRedlock:
		clients := make([]redis.Client, len(e.Addrs))
		closers := make([]func() error, len(e.Addrs))
		for i, a := range e.Addrs {
			c := e.redisClient(a, tlsConfig)
			clients[i], closers[i] = c, c.Close
		}
		eng, err := redis.NewRedlock(clients, redis.WithNodeOptions(e.redisOptions()...))
		return own(eng, err, closers...)
	}
	client := e.redisClient(e.Addrs[0], tlsConfig)
	eng, err := redis.New(client, e.redisOptions()...)
	return own(eng, err, client.Close)
}

// redisClient is a go-redis client of one server at addr.
func (e *EngineSpec) redisClient(addr string, tlsConfig *tls.Config) *goredis.Client {
	// ContextTimeoutEnabled: the engine's own deadlines (a renewal's, a
	// round trip's) bound reads on a hung server too.
	return goredis.NewClient(&goredis.Options{Addr: addr, Username: e.Username, Password: e.password,
		PoolSize: e.MaxConns, ClientName: e.clientName(), TLSConfig: tlsConfig, ContextTimeoutEnabled: true})
}

// buildEtcd dials an etcd engine; the engine owns its client: Close closes
// it. With a username the client connects (and authenticates) at the
// engine's first call, not here.
func (e *EngineSpec) buildEtcd() (engine.Engine, error) {
	cfg := clientv3.Config{Endpoints: e.Addrs, Username: e.Username, Password: e.password}
	if e.TLS != nil {
		var err error
		if cfg.TLS, err = e.TLS.clientConfig(); err != nil {
			return nil, err
		}
	}
	var opts []etcd.Option
	if e.Prefix != "" {
		opts = append(opts, etcd.WithPrefix(e.Prefix))
	}
	if e.SessionTTL != 0 {
		opts = append(opts, etcd.WithLeaseTTL(e.SessionTTL))
	}
	eng, err := etcd.Dial(cfg, opts...)
	return own(eng, err)
}

// buildZooKeeper dials a zookeeper engine; the engine owns its connection:
// Close closes it.
func (e *EngineSpec) buildZooKeeper() (engine.Engine, error) {
	timeout := e.SessionTimeout
	if timeout == 0 {
		timeout = DefaultZKSessionTimeout
	}
	opts := []zookeeper.Option{zookeeper.WithSessionTimeout(timeout)}
	if e.Prefix != "" {
		opts = append(opts, zookeeper.WithPrefix(e.Prefix))
	}
	if e.Username != "" {
		opts = append(opts, zookeeper.WithDigest(e.Username, e.password))
	}
	eng, err := zookeeper.Dial(e.Addrs, opts...)
	return own(eng, err)
}

// buildConsul dials a consul engine with the options the entry sets.
func (e *EngineSpec) buildConsul() (engine.Engine, error) {
	var opts []consul.Option
	add := func(set bool, o consul.Option) {
		if set {
			opts = append(opts, o)
		}
	}
	add(e.token != "", consul.WithToken(e.token))
	add(e.Datacenter != "", consul.WithDatacenter(e.Datacenter))
	add(e.SessionTTL != 0, consul.WithSessionTTL(e.SessionTTL))
	if e.LockDelay != nil {
		opts = append(opts, consul.WithLockDelay(*e.LockDelay))
	}
	add(e.Fair, consul.WithFair(true))
	if e.Starvation != nil {
		opts = append(opts, consul.WithStarvation(*e.Starvation))
	}
	add(e.MaxConns != 0, consul.WithMaxConns(e.MaxConns))
	add(e.Prefix != "", consul.WithPrefix(e.Prefix))
	if e.TLS != nil {
		opts = append(opts, consul.WithTLS(e.TLS.consulConfig()))
	}
	eng, err := consul.Dial(e.Addrs[0], opts...)
	return own(eng, err)
}

// buildMySQL opens a mysql engine, which owns its pool (Close closes it),
// and migrates its table.
func (e *EngineSpec) buildMySQL(ctx context.Context) (engine.Engine, error) {
	var opts []mysql.Option
	if e.Table != "" {
		opts = append(opts, mysql.WithTable(e.Table))
	}
	if e.Strategy != "" {
		opts = append(opts, mysql.WithStrategy(mysql.Strategy(e.Strategy)))
	}
	if e.MaxConns != 0 {
		opts = append(opts, mysql.WithMaxConns(e.MaxConns))
	}
	if e.SessionConns != 0 {
		opts = append(opts, mysql.WithSessionConns(e.SessionConns))
	}
	if e.HolderRecords != nil {
		opts = append(opts, mysql.WithHolderRecords(*e.HolderRecords))
	}
	dsn, err := e.mysqlDSN()
	if err != nil {
		return nil, err
	}
	eng, err := mysql.Open(dsn, opts...)
	if err != nil {
		return nil, err
	}
	if err := eng.Migrate(ctx); err != nil {
		_ = eng.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return eng, nil
}

// buildPostgres makes a pgx pool of the entry's DSN (with its username,
// password, TLS and pool size applied), a postgres engine on it, and
// migrates the engine's tables with ctx. The pool connects lazily; the
// engine's Close closes it.
func (e *EngineSpec) buildPostgres(ctx context.Context) (engine.Engine, error) {
	pcfg, err := pgxpool.ParseConfig(e.DSN)
	if err != nil {
		// validate parsed it already; buildError scrubs the text anyway.
		return nil, fmt.Errorf("%w: dsn: %w", ErrInvalid, err)
	}
	if e.Username != "" {
		pcfg.ConnConfig.User = e.Username
	}
	if e.password != "" {
		pcfg.ConnConfig.Password = e.password
	}
	if e.TLS != nil {
		tc, err := e.TLS.clientConfig()
		if err != nil {
			return nil, err
		}
		if tc.ServerName == "" {
			tc.ServerName = pcfg.ConnConfig.Host
		}
		// Encrypted or nothing: no plain-text fallback.
		pcfg.ConnConfig.TLSConfig, pcfg.ConnConfig.Fallbacks = tc, nil
	}
	if e.MaxConns != 0 {
		pcfg.MaxConns = int32(e.MaxConns)
	}
	var opts []postgres.Option
	if e.Table != "" {
		opts = append(opts, postgres.WithTable(e.Table))
	}
	if e.Strategy != "" {
		opts = append(opts, postgres.WithStrategy(postgres.Strategy(e.Strategy)))
	}
	if e.SessionConns != 0 {
		opts = append(opts, postgres.WithSessionConns(e.SessionConns))
	}
	if e.HolderRecords != nil {
		opts = append(opts, postgres.WithHolderRecords(*e.HolderRecords))
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	closePool := func() error { pool.Close(); return nil }
	pg, err := postgres.New(pool, opts...)
	if err != nil {
		_ = closePool()
		return nil, err
	}
	if err := pg.Migrate(ctx); err != nil {
		_ = pg.Close()
		_ = closePool()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return own(pg, nil, closePool)
}

// mysqlDSN returns the DSN a mysql engine opens: e.DSN, plus tls=<name>
// when the engine has a tls section, after registering the TLS
// configuration with go-sql-driver/mysql under that name. The name is
// "cerberus-<engine name>-<hash of the tls section>", so two
// configurations of one engine name with different TLS settings do not
// replace each other's registration; building the same one again
// re-registers it with the files as they are now.
func (e *EngineSpec) mysqlDSN() (string, error) {
	if e.TLS == nil {
		return e.DSN, nil
	}
	tc, err := e.TLS.clientConfig()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(e.TLS.String()))
	name := "cerberus-" + e.Name + "-" + hex.EncodeToString(sum[:6])
	if err := mysqldrv.RegisterTLSConfig(name, tc); err != nil {
		return "", fmt.Errorf("tls: %w", err)
	}
	dc, err := mysqldrv.ParseDSN(e.DSN)
	if err != nil {
		// validate parsed it already; the driver's message names no
		// secret, and buildError scrubs it anyway.
		return "", fmt.Errorf("%w: dsn: %w", ErrInvalid, err)
	}
	if dc.TLSConfig != "" {
		return "", fmt.Errorf("%w: tls: the dsn already sets tls=%s; configure TLS in one place",
			ErrInvalid, dc.TLSConfig)
	}
	dc.TLSConfig = name
	return dc.FormatDSN(), nil
}

// clientName is the name the go-redis clients give their connections
// (CLIENT SETNAME), so that operators can tell them apart in CLIENT LIST.
func (e *EngineSpec) clientName() string { return "cerberus-" + e.Name }

func (e *EngineSpec) redisOptions() []redis.Option {
	var opts []redis.Option
	if e.Prefix != "" {
		opts = append(opts, redis.WithPrefix(e.Prefix))
	}
	if e.Fair {
		opts = append(opts, redis.WithFair(true))
	}
	if e.Starvation != nil {
		opts = append(opts, redis.WithStarvation(*e.Starvation))
	}
	return opts
}

// own returns eng wrapped so that its Close also runs closers, the clients
// Build made for it. If the constructor failed, the clients are closed now.
// A typed nil eng (constructor error) is never wrapped.
func own[E engine.Engine](eng E, err error, closers ...func() error) (engine.Engine, error) {
	if err != nil {
		for _, c := range closers {
			_ = c()
		}
		return nil, err
	}
	if len(closers) == 0 {
		return eng, nil
	}
	return &owned{Engine: eng, closers: closers}, nil
}

// owned is an engine together with the clients built for it.
type owned struct {
	engine.Engine
	closers []func() error

	once sync.Once
	err  error
}

// Close closes the engine, then the clients it ran on. It is idempotent.
func (o *owned) Close() error {
	o.once.Do(func() {
		errs := []error{o.Engine.Close()}
		for _, c := range o.closers {
			errs = append(errs, c())
		}
		o.err = errors.Join(errs...)
	})
	return o.err
}

// Unwrap returns the engine inside, for callers that need its concrete
// type (such as *redis.Engine): an owned engine is an engine.Wrapper.
func (o *owned) Unwrap() engine.Engine { return o.Engine }

var _ engine.Wrapper = (*owned)(nil)

// buildError names the engine and keeps the cause for errors.Is, unless
// the cause's text holds a secret; then only the scrubbed text is kept.
func buildError(i int, e *EngineSpec, err error) error {
	prefix := fmt.Sprintf("engines[%d] (%s)", i, e.Name)
	secrets := []string{e.password, e.token, e.Password, e.Token, e.DSN, dsnPassword(e.DSN)}
	msg := err.Error()
	if clean := scrub(msg, secrets); clean != msg {
		return fmt.Errorf("%s: %s", prefix, clean)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

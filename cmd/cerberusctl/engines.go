package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cerberus-go/cerberus/config"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/engine/postgres"
)

// engineNames lists the engines the demo can run on. Server addresses come
// from the same CERBERUS_* variables the tests read (scripts/services.sh env
// prints them).
var engineNames = []string{"memory", "redis", "zookeeper", "consul", "mysql", "mysql-row", "etcd", "postgres",
	"postgres-lease"}

// crossProcess reports whether an engine locks across OS processes.
func crossProcess(name string) bool { return name != "memory" }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// owned is an engine that also owns the client it was built on.
type owned struct {
	engine.Engine
	closeClient func() error
}

// Close closes the engine, then its client.
func (o owned) Close() error {
	err := o.Engine.Close()
	if cerr := o.closeClient(); err == nil {
		err = cerr
	}
	return err
}

// demoEngine describes the named engine as configuration, so the demo
// builds it with config.Build, the constructors a service's config file
// reaches.
func demoEngine(name string) (config.EngineSpec, bool) {
	e := config.EngineSpec{Name: name}
	switch name {
	case "memory":
		e.Kind = config.KindMemory
	case "redis":
		e.Kind, e.Addrs, e.MaxConns = config.KindRedis, []string{envOr("CERBERUS_REDIS_ADDR",
			"127.0.0.1:6379")}, 64
	case "zookeeper":
		e.Kind, e.Addrs, e.SessionTimeout = config.KindZooKeeper, strings.Split(envOr("CERBERUS_ZK_ADDR",
			"127.0.0.1:2181"), ","), 10*time.Second
	case "consul":
		// Up to 64 demo processes share the agent's per-client connection limit.
		e.Kind, e.Addrs, e.MaxConns = config.KindConsul, []string{envOr("CERBERUS_CONSUL_ADDR",
			"127.0.0.1:8500")}, 16
	case "mysql", "mysql-row":
		e.Kind, e.DSN, e.Table = config.KindMySQL, envOr("CERBERUS_MYSQL_DSN",
			"root:@tcp(127.0.0.1:3306)/test?parseTime=true"), "cerberus_demo_locks"
		e.Strategy = string(mysql.StrategyLease)
		if name == "mysql-row" {
			e.Strategy = string(mysql.StrategyRow)
		}
		e.MaxConns = 24 // four demo processes stay well under MySQL's default max_connections (151)
	case "etcd":
		e.Kind, e.Addrs = config.KindEtcd, strings.Split(envOr("CERBERUS_ETCD_ADDR", "127.0.0.1:2379"), ",")
	case "postgres", "postgres-lease":
		e.Kind, e.DSN, e.Table = config.KindPostgres, envOr("CERBERUS_POSTGRES_DSN",
			"postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "cerberus_demo_locks"
		e.Strategy = string(postgres.StrategySession)
		if name == "postgres-lease" {
			e.Strategy = string(postgres.StrategyLease)
		}
		// The session strategy holds a connection per held or waiting lock
		// (the others wait for the pool): four demo processes take at most
		// 48 of PostgreSQL's default max_connections (100), leaving room
		// for other clients.
		e.MaxConns = 12
	default:
		return e, false
	}
	return e, true
}

// newEngine builds the named engine, checking the name before any I/O.
func newEngine(name string) (engine.Engine, error) {
	e, ok := demoEngine(name)
	if !ok {
		if !slices.Contains(engineNames, name) {
			return nil, fmt.Errorf("unknown engine %q (available: %s)", name,
				strings.Join(engineNames, ", "))
		}
		return nil, fmt.Errorf("engine %q is listed but not wired", name)
	}
	// Long enough for the mysql or postgres tables' migration.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := config.Config{Engines: []config.EngineSpec{e}}
	built, err := cfg.Build(ctx)
	if err != nil {
		return nil, err
	}
	return built[0].Engine, nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
)

// engineNames lists the engines the demo can run on. Each engine's issue
// adds its own entry; the failover manager's config package will take this
// over. Server addresses come from the same CERBERUS_* variables the tests
// read (scripts/services.sh env prints them).
var engineNames = []string{"memory", "redis", "zookeeper", "consul", "mysql", "mysql-row"}

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

// newEngine builds the named engine, checking the name before any I/O.
func newEngine(name string) (engine.Engine, error) {
	switch name {
	case "memory":
		return memory.New(), nil
	case "redis":
		c := goredis.NewClient(&goredis.Options{Addr: envOr("CERBERUS_REDIS_ADDR", "127.0.0.1:6379"), PoolSize: 64})
		e, err := redis.New(c)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		return owned{e, c.Close}, nil
	case "zookeeper":
		return zookeeper.Dial(strings.Split(envOr("CERBERUS_ZK_ADDR", "127.0.0.1:2181"), ","), 10*time.Second)
	case "consul":
		// Up to 64 demo processes share the agent's per-client connection limit.
		return consul.Dial(envOr("CERBERUS_CONSUL_ADDR", "127.0.0.1:8500"), consul.WithMaxConns(16))
	case "mysql", "mysql-row":
		strategy := mysql.StrategyLease
		if name == "mysql-row" {
			strategy = mysql.StrategyRow
		}
		e, err := mysql.Open(envOr("CERBERUS_MYSQL_DSN", "root:@tcp(127.0.0.1:3306)/test?parseTime=true"),
			mysql.WithTable("cerberus_demo_locks"), mysql.WithStrategy(strategy),
			mysql.WithMaxConns(24)) // four demo processes stay well under MySQL's default max_connections (151)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Migrate(ctx); err != nil {
			_ = e.Close()
			return nil, err
		}
		return e, nil
	}
	if !slices.Contains(engineNames, name) {
		return nil, fmt.Errorf("unknown engine %q (available: %s)", name, strings.Join(engineNames, ", "))
	}
	return nil, fmt.Errorf("engine %q is listed but not wired", name)
}

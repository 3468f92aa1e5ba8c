package config

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

func quoted(addrs []string) string {
	q := make([]string, len(addrs))
	for i, a := range addrs {
		q[i] = fmt.Sprintf("%q", a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// realConfig has one engine of every kind, on the test servers.
func realConfig(t *testing.T) *Config {
	t.Helper()
	src := fmt.Sprintf(`engines:
  - {name: redis-1, kind: redis, addrs: [%q], prefix: "cerberus-config-test:", fair: true}
  - {name: cluster, kind: redis-cluster, addrs: %s, prefix: "cerberus-config-test:"}
  - {name: redlock, kind: redlock, addrs: %s, prefix: "cerberus-config-test:"}
  - {name: zk, kind: zookeeper, addrs: [%q], session_timeout: 4s, prefix: /cerberus-config-test}
  - {name: consul, kind: consul, addrs: [%q], prefix: cerberus-config-test, session_ttl: 10s, lock_delay: 0s}
  - {name: mysql, kind: mysql, dsn: %q, table: cerberus_config_test, max_conns: 5}
  - {name: mysql-clock, kind: mysql, dsn: %[6]q, table: cerberus_config_test, strategy: session, holder_records: false}
  - {name: mem, kind: memory}
`, testenv.RedisAddr(t), quoted(testenv.RedisClusterAddrs(t)), quoted(testenv.RedlockAddrs(t)),
		testenv.ZooKeeperAddr(t), testenv.ConsulAddr(t), testenv.MySQLDSN(t))
	cfg, err := Parse([]byte(src), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// redisClients counts the connections named name on the server at addr.
func redisClients(t *testing.T, addr, name string) int {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST on %s: %v", addr, err)
	}
	return strings.Count(list, " name="+name+" ")
}

// waitClients waits (bounded) until addr has no connection named name.
func waitNoClients(t *testing.T, addr, name string) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for redisClients(t, addr, name) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("connections named %s to %s still open %v after Close", name, addr, testWait)
		}
		time.Sleep(20 * time.Millisecond) // polling the server, not ordering events
	}
}

func TestBuildRealServers(t *testing.T) {
	cfg := realConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	built, err := cfg.Build(ctx)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			for _, n := range built {
				n.Engine.Close()
			}
		}
	})
	if len(built) != len(cfg.Engines) {
		t.Fatalf("Build returned %d engines, want %d", len(built), len(cfg.Engines))
	}
	wantKind := map[string]string{KindRedis: "redis", KindRedisCluster: "redis", KindRedlock: "redlock",
		KindZooKeeper: "zookeeper", KindConsul: "consul", KindMySQL: "mysql", KindMemory: "memory"}
	for i, n := range built {
		e := cfg.Engines[i]
		if n.Name != e.Name {
			t.Errorf("built[%d].Name = %q, want %q", i, n.Name, e.Name)
		}
		if got := n.Engine.Name(); got != wantKind[e.Kind] {
			t.Errorf("built[%d] (%s) is a %q engine, want %q", i, n.Name, got, wantKind[e.Kind])
		}
		if err := n.Engine.Ping(ctx); err != nil {
			t.Errorf("built[%d] (%s).Ping: %v", i, n.Name, err)
			continue
		}
		// The engine grants and releases a lock.
		l, err := n.Engine.Acquire(ctx, engine.Request{Key: t.Name(), TTL: max(10*time.Second, n.Engine.Limits().MinTTL)})
		if err != nil {
			t.Errorf("built[%d] (%s).Acquire: %v", i, n.Name, err)
			continue
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("built[%d] (%s) Release: %v", i, n.Name, err)
		}
		if e.Kind == KindMySQL {
			my, _ := n.Engine.(*mysql.Engine)
			if w, ok := n.Engine.(engine.Wrapper); ok {
				my, _ = w.Unwrap().(*mysql.Engine)
			}
			if want := e.HolderRecords == nil; my == nil || my.HolderRecords() != want {
				t.Errorf("built[%d] (%s) is %T, want a *mysql.Engine with HolderRecords %v", i, n.Name, n.Engine, want)
			}
		}
	}

	// The redis clients Build made are connected now, and named.
	redisAddr := cfg.Engines[0].Addrs[0]
	if n := redisClients(t, redisAddr, "cerberus-redis-1"); n == 0 {
		t.Fatalf("no connection named cerberus-redis-1 on %s after Ping", redisAddr)
	}
	for _, a := range cfg.Engines[2].Addrs {
		if n := redisClients(t, a, "cerberus-redlock"); n == 0 {
			t.Fatalf("no connection named cerberus-redlock on %s after Ping", a)
		}
	}

	closed = true
	for _, n := range built {
		if err := n.Engine.Close(); err != nil {
			t.Errorf("%s: Close: %v", n.Name, err)
		}
		if err := n.Engine.Close(); err != nil {
			t.Errorf("%s: second Close: %v", n.Name, err)
		}
		if err := n.Engine.Ping(ctx); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("%s: Ping after Close = %v, want ErrClosed", n.Name, err)
		}
	}
	// Close closed the clients Build made, not only the engines.
	waitNoClients(t, redisAddr, "cerberus-redis-1")
	for _, a := range cfg.Engines[2].Addrs {
		waitNoClients(t, a, "cerberus-redlock")
	}
	for _, a := range cfg.Engines[1].Addrs {
		waitNoClients(t, a, "cerberus-cluster")
	}
}

// A failing engine closes the ones built before it, clients included: the
// redis engine's renewal loop and its go-redis client's goroutines would
// otherwise be left running.
func TestBuildFailureClosesBuilt(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	cfg, err := Parse([]byte(fmt.Sprintf(`engines:
  - {name: first, kind: redis, addrs: [%q]}
  - {name: second, kind: redlock, addrs: %s}
  - {name: broken, kind: mysql, dsn: "u@tcp(127.0.0.1:1)/db?timeout=2s"}
`, testenv.RedisAddr(t), quoted(testenv.RedlockAddrs(t)))), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	err = buildMustFail(t, cfg, "an unreachable mysql")
	if !strings.HasPrefix(err.Error(), "engines[2] (broken): migrate: ") {
		t.Errorf("Build error = %v", err)
	}
	var op *engine.OpError
	if !errors.As(err, &op) {
		t.Errorf("Build error lost its cause: %#v", err)
	}
}

// A Config built by hand with an unknown kind fails Build cleanly.
func TestBuildUnknownKind(t *testing.T) {
	cfg := &Config{Engines: []EngineSpec{{Name: "m", Kind: KindMemory}, {Name: "x", Kind: "cassandra"}}}
	got, err := cfg.Build(context.Background())
	if err == nil || got != nil {
		t.Fatalf("Build = %v, %v", got, err)
	}
	if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), `engines[1] (x): `) {
		t.Errorf("Build error = %v", err)
	}
}

// owned closes the engine, then every client, once.
func TestOwnedClose(t *testing.T) {
	var calls []string
	closer := func(name string, err error) func() error {
		return func() error { calls = append(calls, name); return err }
	}
	boom := errors.New("boom")
	e, err := own(&fakeEngine{Engine: nil, closed: &calls}, nil, closer("a", nil), closer("b", boom))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); !errors.Is(err, boom) {
		t.Errorf("Close = %v, want boom", err)
	}
	e.Close()
	if got := strings.Join(calls, ","); got != "engine,a,b" {
		t.Errorf("close order = %s, want engine,a,b (once each)", got)
	}

	calls = nil
	if _, err := own(&fakeEngine{closed: &calls}, boom, closer("a", nil)); !errors.Is(err, boom) {
		t.Errorf("own with an error = %v", err)
	}
	if got := strings.Join(calls, ","); got != "a" {
		t.Errorf("a failed constructor closed %q, want the client a only", got)
	}
}

type fakeEngine struct {
	engine.Engine
	closed *[]string
}

func (f *fakeEngine) Close() error { *f.closed = append(*f.closed, "engine"); return nil }

// buildMustFail builds cfg, which must fail (because of what), and returns
// the error; a Build that fails must return no engines.
func buildMustFail(t *testing.T, cfg *Config, what string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	got, err := cfg.Build(ctx)
	if err == nil {
		for _, n := range got {
			n.Engine.Close()
		}
		t.Fatalf("Build succeeded with %s", what)
	}
	if got != nil {
		t.Errorf("Build returned engines with its error")
	}
	return err
}

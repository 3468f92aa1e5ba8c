package integration

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/etcd"
	"github.com/cerberus-go/cerberus/engine/postgres"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/failover"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// pgConns is the pool of the postgres engines the workers and failover
// tests make: the session strategy shares postgres.DefaultSessionConns of
// them among the leases it grants at once, and pins one per lease that
// waited for its key.
const pgConns = 24

// dialPostgres builds a postgres engine of the strategy a worker spec
// names: "postgres" (session) or "postgres-lease".
func dialPostgres(s workerSpec) (engine.Engine, error) {
	strategy := postgres.StrategySession
	if s.Engine == "postgres-lease" {
		strategy = postgres.StrategyLease
	}
	return postgres.Open(s.Addrs[0], postgres.WithTable(s.Table), postgres.WithStrategy(strategy),
		postgres.WithMaxConns(pgConns), postgres.WithOpTimeout(time.Second),
		postgres.WithHolderRecords(s.Engine != "postgres-clock"))
}

// migratedPostgresTable migrates, for both strategies, a lock table of the
// test's own on the PostgreSQL at dsn.
func migratedPostgresTable(t *testing.T, dsn string) string {
	t.Helper()
	table := strings.ReplaceAll(unique(t, "pg"), "-", "_")
	for _, engineName := range []string{"postgres", "postgres-lease"} {
		e, err := dialPostgres(workerSpec{Engine: engineName, Addrs: []string{dsn}, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		err = e.(*postgres.Engine).Migrate(testContext(t))
		_ = e.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return table
}

// startPostgresTarget starts a private PostgreSQL behind a fault proxy and
// migrates a lock table on it.
func startPostgresTarget(t *testing.T) (*testenv.Postgres, *faultProxy, string, string) {
	srv := testenv.StartPostgres(t)
	px := startProxy(t, srv.Addr)
	table := migratedPostgresTable(t, srv.DSN)
	return srv, px, strings.Replace(srv.DSN, srv.Addr, px.Addr(), 1), table
}

// TestCheckerPostgres: the lease strategy on a private PostgreSQL behind a
// fault proxy, with semaphores and elections.
func TestCheckerPostgres(t *testing.T) {
	srv, px, dsn, table := startPostgresTarget(t)
	checkEngine(t, chaosTarget{
		name: "postgres-lease", engine: "postgres-lease", addrs: []string{dsn}, table: table, ttl: chaosTTL,
		faults:      append(networkFaults(t, px, chaosTTL), serverFaults(srv, chaosTTL)...),
		clientPause: 2*chaosTTL + time.Second,
		primitives:  true,
	})
}

// TestCheckerPostgresSession: the session strategy (advisory locks on
// pinned connections) on a private PostgreSQL behind a fault proxy. Its
// locks die with the server, so overlaps across a crash are judged by the
// fence (volatile), as for MySQL's row strategy.
func TestCheckerPostgresSession(t *testing.T) {
	srv, px, dsn, table := startPostgresTarget(t)
	checkEngine(t, chaosTarget{
		name: "postgres", engine: "postgres", addrs: []string{dsn}, table: table, ttl: chaosTTL, volatile: true,
		faults:      append(networkFaults(t, px, chaosTTL), serverFaults(srv, chaosTTL)...),
		clientPause: 2*chaosTTL + time.Second,
	})
}

// TestCheckerPostgresSessionClock: the session strategy without holder
// records (tokens from the server's clock alone) under the same faults.
func TestCheckerPostgresSessionClock(t *testing.T) {
	srv, px, dsn, table := startPostgresTarget(t)
	checkEngine(t, chaosTarget{
		name: "postgres-clock", engine: "postgres-clock", addrs: []string{dsn}, table: table, ttl: chaosTTL,
		volatile: true, faults: append(networkFaults(t, px, chaosTTL), serverFaults(srv, chaosTTL)...),
		clientPause: 2*chaosTTL + time.Second,
	})
}

// TestFailoverPostgres kills a private PostgreSQL under 16 busy lockers,
// with automatic failover and the fence on, for each strategy as the
// primary (Redis second), and kills a private Redis with PostgreSQL as the
// secondary: the manager switches, every lease held at the kill ends, no
// Lock call outlives its context, and the second engine grants locks. The
// timings are logged, not asserted.
func TestFailoverPostgres(t *testing.T) {
	for _, tc := range []struct {
		name    string
		primary string // "postgres", "postgres-lease" or "redis"
		second  string
	}{
		{"session primary", "postgres", "redis"},
		{"lease primary", "postgres-lease", "redis"},
		{"session secondary", "redis", "postgres"},
		{"lease secondary", "redis", "postgres-lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failoverPair(t, tc.primary, tc.second)
		})
	}
}

// failoverPair runs 16 lockers on a failover.Manager of two engines ("redis",
// "postgres", "postgres-lease" or, as the second only, "etcd") with
// automatic failover and the fence on, kills the first engine's private
// server, and checks the switch: every lease held at the kill ends, no
// Lock call outlives its context, and the second engine grants locks.
func failoverPair(t *testing.T, primary, second string) {
	const (
		lockers     = 16
		callTimeout = 2 * time.Second
		lease       = time.Second
	)
	// The killed server is private; the other engine runs on the shared one.
	var kill func()
	mk := func(name string, private bool) engine.Engine {
		if name == "etcd" {
			if private {
				t.Fatalf("failoverPair kills no etcd: use TestFailoverEtcdToRedis")
			}
			e, err := etcd.Dial(clientv3.Config{Endpoints: []string{testenv.EtcdAddr(t)}, Logger: zap.NewNop()},
				etcd.WithPrefix(fmt.Sprintf("failover-pair-%d/", time.Now().UnixNano())),
				etcd.WithLeaseTTL(etcdLease))
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		if name == "redis" {
			addr := testenv.RedisAddr(t)
			if private {
				srv := testenv.StartRedis(t)
				addr, kill = srv.Addr, srv.Kill
			}
			rc := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1,
				DialTimeout: 200 * time.Millisecond})
			t.Cleanup(func() { _ = rc.Close() })
			e, err := redis.New(rc, redis.WithPrefix(fmt.Sprintf("failover-pg-%d:", time.Now().UnixNano())))
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		dsn := testenv.PostgresDSN(t)
		if private {
			srv := testenv.StartPostgres(t)
			dsn, kill = srv.DSN, srv.Kill
		}
		table := migratedPostgresTable(t, dsn)
		e, err := dialPostgres(workerSpec{Engine: name, Addrs: []string{dsn}, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	pe, se := mk(primary, true), mk(second, false)
	var switchedAt atomic.Int64
	f, err := failover.New([]failover.NamedEngine{{Name: "first", Engine: pe}, {Name: "second", Engine: se}},
		failover.Options{Auto: true, Fence: true, Interval: 200 * time.Millisecond, Threshold: 3,
			OnSwitch: func(failover.SwitchEvent) { switchedAt.CompareAndSwap(0, time.Now().UnixNano()) }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(f, cerberus.WithWatchdog(lease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	run := fmt.Sprintf("failover-pg/%d", time.Now().UnixNano())
	ls := startLockers(c, lockers, 4, run, callTimeout)
	for deadline := time.Now().Add(20 * time.Second); ls.grants.Load() < 100; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			ls.stopAll()
			t.Fatalf("only %d grants on %s before the kill", ls.grants.Load(), primary)
		}
	}
	kept, err := c.Lock(testContext(t), run+"/kept")
	if err != nil {
		ls.stopAll()
		t.Fatal(err)
	}
	heldAtKill := append(ls.kill(kill), kept)
	for deadline := time.Now().Add(30 * time.Second); ls.firstOnSecond.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			ls.stopAll()
			t.Fatalf("no grant on %s within 30s of the kill (active: %s)", second, f.Active())
		}
	}
	ls.stopAll()
	if f.Active() != "second" {
		t.Fatalf("active engine %s after the kill, want second (%s)", f.Active(), second)
	}
	mustAllEnd(t, heldAtKill, 20*time.Second)
	if n := ls.overran.Load(); n > 0 {
		t.Errorf("%d Lock calls ran past their %v context", n, callTimeout)
	}
	k := ls.killedAt.Load()
	t.Logf("%s -> %s: %d grants; %d leases held at the kill, all ended; kill -> switch %v, kill -> first grant %v",
		primary, second, ls.grants.Load(), len(heldAtKill), time.Duration(switchedAt.Load()-k),
		time.Duration(ls.firstOnSecond.Load()-k))
}

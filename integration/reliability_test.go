package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// chaosTTL is the lease TTL of the checker runs: short, so that the faults
// (each longer than it) make leases expire and the checker sees how every
// engine tells its holders.
const chaosTTL = time.Second

// Each test below runs the checker (chaos_test.go) on one engine: three
// worker processes of six lockers each on four hot keys, while faults are
// injected one after another. They run one at a time: on a small machine
// parallel runs would mostly measure each other.

// TestCheckerRedis: a private redis-server (AOF with fsync always, so a
// restart keeps the fencing counters) behind a fault proxy.
func TestCheckerRedis(t *testing.T) {
	srv := testenv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	px := startProxy(t, srv.Addr)
	checkEngine(t, chaosTarget{
		name: "redis", engine: "redis", addrs: []string{px.Addr()}, ttl: chaosTTL,
		faults:      append(networkFaults(t, px, chaosTTL), serverFaults(srv, chaosTTL)...),
		clientPause: 2*chaosTTL + time.Second,
		primitives:  true,
	})
}

// TestCheckerRedisSentinel: the workers reach a private redis-server
// (AOF with fsync always) through go-redis's Sentinel failover client; the
// sentinel monitors the master through the fault proxy, so the clients'
// connections, which go where the sentinel points, take the proxy's
// faults too.
func TestCheckerRedisSentinel(t *testing.T) {
	srv := testenv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	px := startProxy(t, srv.Addr)
	sentinel := testenv.StartRedisSentinel(t, px.Addr())
	checkEngine(t, chaosTarget{
		name: "redis-sentinel", engine: "redis-sentinel", addrs: []string{sentinel.Addr}, ttl: chaosTTL,
		faults:      append(networkFaults(t, px, chaosTTL), serverFaults(srv, chaosTTL)...),
		clientPause: 2*chaosTTL + time.Second,
		primitives:  true,
	})
}

// TestCheckerRedisCluster: a three-master Redis Cluster, one master
// stopped mid-run. Cluster clients learn the nodes' own addresses, so
// there is no proxy: the faults are the node's.
func TestCheckerRedisCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	n := c.Nodes[1]
	checkEngine(t, chaosTarget{
		name: "redis-cluster", engine: "redis-cluster", addrs: c.Addrs, ttl: chaosTTL, primitives: true,
		faults: []fault{{name: "one master SIGSTOP", dur: 3 * time.Second, do: n.Pause, undo: func() { n.Resume(); c.Wait() }}},
	})
}

// TestCheckerRedlock: Redlock over five private redis-servers without
// persistence, restarted one after another, then two at once. A restart
// forgets the node's keys and fencing counters, so the run is volatile:
// an overlap that begins at a restart is fine only if the fenced resource
// refused the older holder's write (see engine/redis, "Redlock").
func TestCheckerRedlock(t *testing.T) {
	var addrs []string
	var nodes []*testenv.RedisServer
	for range 5 {
		s := testenv.StartRedis(t)
		nodes, addrs = append(nodes, s), append(addrs, s.Addr)
	}
	// Every node of a fault is killed before any restarts, and the crash
	// time is taken once they are all dead: a grant a node made while the
	// kills were under way died with it.
	restart := func(name string, ns ...*testenv.RedisServer) fault {
		var killed time.Time
		return fault{name: name, crash: true, killed: &killed, do: func() {
			for _, n := range ns {
				n.Kill()
			}
			killed = time.Now()
			for _, n := range ns {
				n.Restart()
			}
		}}
	}
	checkEngine(t, chaosTarget{
		name: "redlock", engine: "redlock", addrs: addrs, ttl: chaosTTL, volatile: true,
		faults: []fault{
			restart("node 0 restarted empty", nodes[0]),
			restart("node 1 restarted empty", nodes[1]),
			restart("node 2 restarted empty", nodes[2]),
			restart("nodes 3 and 4 restarted empty", nodes[3], nodes[4]),
		},
	})
}

// zkSession is the ZooKeeper session timeout of the checker runs: the
// private servers' tick is 500ms, so sessions may last 1s to 10s.
const zkSession = 2 * time.Second

// TestCheckerZooKeeper: a private ZooKeeper behind a fault proxy.
func TestCheckerZooKeeper(t *testing.T) {
	srv := testenv.StartZooKeeper(t)
	px := startProxy(t, srv.Addr)
	checkEngine(t, chaosTarget{
		name: "zookeeper", engine: "zookeeper", addrs: []string{px.Addr()}, ttl: zkSession,
		faults:      append(networkFaults(t, px, zkSession), serverFaults(srv, zkSession)...),
		clientPause: 2*zkSession + time.Second,
		primitives:  true,
	})
}

// TestCheckerZooKeeperEnsemble: a three-node ensemble; the leader is
// killed mid-run and comes back later.
func TestCheckerZooKeeperEnsemble(t *testing.T) {
	e := testenv.StartZooKeeperEnsemble(t, 3)
	var leader *testenv.ZooKeeper
	checkEngine(t, chaosTarget{
		name: "zookeeper-ensemble", engine: "zookeeper", addrs: e.Addrs, ttl: zkSession, primitives: true,
		faults: []fault{{name: "leader killed, later restarted", dur: 3 * time.Second,
			do:   func() { leader = e.Nodes[e.Leader()]; leader.Kill() },
			undo: func() { leader.Restart() }}},
	})
}

// etcdLease is the etcd lease TTL of the etcd runs: etcd's minimum with
// its default election timeout (1s) is 2s.
const etcdLease = 2 * time.Second

// TestCheckerEtcd: a private single-member etcd behind a fault proxy,
// paused and restarted (its data dir, and so its revisions and leases,
// survive the restart).
func TestCheckerEtcd(t *testing.T) {
	srv := testenv.StartEtcd(t)
	px := startProxy(t, srv.Addr)
	checkEngine(t, chaosTarget{
		name: "etcd", engine: "etcd", addrs: []string{px.Addr()}, ttl: etcdLease,
		faults:      append(networkFaults(t, px, etcdLease), serverFaults(srv, etcdLease)...),
		clientPause: 2*etcdLease + time.Second,
		primitives:  true,
	})
}

// TestCheckerEtcdCluster: a three-member cluster; the leader is killed
// mid-run and later restarted, then one member is stopped (SIGSTOP), as
// a member cut off from the others would be.
func TestCheckerEtcdCluster(t *testing.T) {
	c := testenv.StartEtcdCluster(t, 3)
	var leader, other *testenv.Etcd
	checkEngine(t, chaosTarget{
		name: "etcd-cluster", engine: "etcd", addrs: c.Addrs, ttl: etcdLease, primitives: true,
		faults: []fault{
			{name: "leader killed, later restarted", dur: 3 * time.Second,
				do:   func() { leader = c.Nodes[c.Leader()]; leader.Kill() },
				undo: func() { leader.Restart() }},
			{name: "a follower SIGSTOP", dur: 3 * time.Second,
				do:   func() { other = c.Nodes[(c.Leader()+1)%len(c.Nodes)]; other.Pause() },
				undo: func() { other.Resume() }},
		},
	})
}

// consulSession is the session TTL of the Consul runs: Consul's minimum.
// The agent invalidates a session between one and two TTLs after its last
// renewal, so the long faults last longer than two.
const consulSession = 10 * time.Second

// TestCheckerConsul: a private dev agent behind a fault proxy. A dev agent
// keeps its state in memory, so it is not restarted (a restart would forget
// every index, and tokens with them); restarts are tested on the cluster.
func TestCheckerConsul(t *testing.T) {
	srv := testenv.StartConsul(t)
	px := startProxy(t, srv.Addr)
	long := 2*consulSession + time.Second
	faults := networkFaults(t, px, consulSession)
	faults[2].dur = long
	checkEngine(t, chaosTarget{
		name: "consul", engine: "consul", addrs: []string{px.Addr()}, ttl: consulSession,
		faults:      append(faults, fault{name: "server SIGSTOP", dur: long, do: srv.Pause, undo: srv.Resume}),
		clientPause: long,
		primitives:  true,
	})
}

// TestCheckerConsulCluster: three Consul servers; the workers talk to the
// first, and the leader (or, if that is the first, the second) is killed
// mid-run and restarted later.
func TestCheckerConsulCluster(t *testing.T) {
	c := testenv.StartConsulCluster(t, 3)
	var victim *testenv.Consul
	checkEngine(t, chaosTarget{
		name: "consul-cluster", engine: "consul", addrs: c.Addrs[:1], ttl: consulSession, primitives: true,
		faults: []fault{{name: "a server killed, later restarted", dur: 5 * time.Second,
			do: func() {
				i := c.Leader()
				if i == 0 {
					i = 1
				}
				victim = c.Nodes[i]
				victim.Kill()
			},
			undo: func() { victim.Restart() }}},
	})
}

// startMySQLTarget starts a private MariaDB behind a fault proxy and
// migrates a lock table on it.
func startMySQLTarget(t *testing.T) (*testenv.MariaDB, *faultProxy, string, string) {
	srv := testenv.StartMariaDB(t)
	px := startProxy(t, srv.Addr)
	table := strings.ReplaceAll(unique(t, "chaos"), "-", "_")
	e, err := mysql.Open(srv.DSN, mysql.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	_ = e.Close()
	return srv, px, strings.Replace(srv.DSN, srv.Addr, px.Addr(), 1), table
}

// TestCheckerMySQL: the lease strategy on a private MariaDB behind a fault
// proxy.
func TestCheckerMySQL(t *testing.T) {
	srv, px, dsn, table := startMySQLTarget(t)
	checkEngine(t, chaosTarget{
		name: "mysql", engine: "mysql", addrs: []string{dsn}, table: table, ttl: chaosTTL,
		faults:      append(networkFaults(t, px, chaosTTL), serverFaults(srv, chaosTTL)...),
		clientPause: 2*chaosTTL + time.Second,
		primitives:  true,
	})
}

// TestCheckerMySQLSession: the session strategy (GET_LOCK on a pinned
// connection) on a private MariaDB behind a fault proxy. Like the row
// strategy's, its locks die with the server (volatile); its tokens stay
// above the old ones after a crash by the clock floor.
func TestCheckerMySQLSession(t *testing.T) {
	srv, px, dsn, table := startMySQLTarget(t)
	checkEngine(t, chaosTarget{
		name: "mysql-session", engine: "mysql-session", addrs: []string{dsn}, table: table, ttl: chaosTTL, volatile: true,
		faults:      append(networkFaults(t, px, chaosTTL), serverFaults(srv, chaosTTL)...),
		clientPause: 2*chaosTTL + time.Second,
	})
}

// TestCheckerMySQLSessionClock: the session strategy without holder
// records (tokens from the server's clock alone) under the same faults.
func TestCheckerMySQLSessionClock(t *testing.T) {
	srv, px, dsn, table := startMySQLTarget(t)
	checkEngine(t, chaosTarget{
		name: "mysql-clock", engine: "mysql-clock", addrs: []string{dsn}, table: table, ttl: chaosTTL, volatile: true,
		faults:      append(networkFaults(t, px, chaosTTL), serverFaults(srv, chaosTTL)...),
		clientPause: 2*chaosTTL + time.Second,
	})
}

// TestCheckerMySQLRow: the row strategy (SELECT ... FOR UPDATE on a pinned
// connection) on a private MariaDB behind a fault proxy. Its locks die with
// the server: after a crash a new server can grant a key again before the
// old holder's connection check (every 250ms) notices, so overlaps across
// the crash are judged by the fence (checker: crashed and fenced).
func TestCheckerMySQLRow(t *testing.T) {
	srv, px, dsn, table := startMySQLTarget(t)
	checkEngine(t, chaosTarget{
		name: "mysql-row", engine: "mysql-row", addrs: []string{dsn}, table: table, ttl: chaosTTL, volatile: true,
		faults:      append(networkFaults(t, px, chaosTTL), serverFaults(srv, chaosTTL)...),
		clientPause: 2*chaosTTL + time.Second,
	})
}

package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	consulapi "github.com/hashicorp/consul/api"
	goredis "github.com/redis/go-redis/v9"
)

// fatalTB stops like a real test on Fatalf (runtime.Goexit) but records the
// message instead of failing, so failure paths can be checked. Everything
// else, TempDir and Cleanup included, goes to the real test.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// fails runs fn with a fatalTB on a goroutine of its own and returns the
// Fatalf message, or "" if fn returned without one.
func fails(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

// isTimeout reports whether err is a network timeout or a context deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

func within(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually retries fn every 100ms until it returns nil or d runs out.
func eventually(t *testing.T, d time.Duration, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	seen := make(map[int]bool)
	ceiling := portCeiling()
	for range 50 {
		p := FreePort(t)
		if p < portLow || p >= ceiling {
			t.Fatalf("FreePort = %d, want in [%d, %d), below the ephemeral range", p, portLow, ceiling)
		}
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		seen[p] = true
	}
}

// TestFreePortSkipsBusy holds every port of a small window but one and
// checks that freePort picks that one. Whether a port FreePort returned is
// still free a moment later cannot be checked: any process on the machine
// (the machine's own services included) may bind it in between, so the
// test owns the busy ports itself.
func TestFreePortSkipsBusy(t *testing.T) {
	t.Parallel()
	const width = 8
	for attempt := 0; attempt < 20; attempt++ {
		lo := portLow + 2000 + rand.IntN(portCeiling()-portLow-2000-width)
		var held []net.Listener
		open := -1
		for p := lo; p < lo+width; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				continue // busy already: freePort must skip it as well
			}
			if open < 0 {
				l.Close() // the one port left free
				open = p
				continue
			}
			held = append(held, l)
		}
		if open < 0 || len(held) < width/2 {
			for _, l := range held {
				l.Close()
			}
			continue // a crowded window: try another
		}
		got := freePort(t, lo, lo+width, 0)
		for _, l := range held {
			l.Close()
		}
		if got != open {
			t.Fatalf("freePort in [%d, %d) = %d, want %d, the only port not listened on", lo, lo+width, got, open)
		}
		return
	}
	t.Fatal("no window of free ports found in 20 attempts")
}

// checkPauseResume shows that ask times out while the server is paused and
// succeeds once it is resumed.
func checkPauseResume(t *testing.T, p *Process, ask func(ctx context.Context) error) {
	t.Helper()
	if err := ask(within(t, 10*time.Second)); err != nil {
		t.Fatalf("before Pause: %v", err)
	}
	p.Pause()
	p.Pause() // idempotent
	err := ask(within(t, 500*time.Millisecond))
	if !isTimeout(err) {
		t.Fatalf("request to a paused server: want a timeout, got %v", err)
	}
	p.Resume()
	if err := ask(within(t, 10*time.Second)); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}

// checkKillRestart kills the server (twice: idempotent), shows it is gone,
// restarts it, and shows it answers on the same address with a new pid.
func checkKillRestart(t *testing.T, p *Process, addr string, ask func(ctx context.Context) error) {
	t.Helper()
	pid := p.Pid()
	if pid <= 0 {
		t.Fatalf("Pid() = %d for a running server", pid)
	}
	p.Kill()
	p.Kill()
	if got := p.Pid(); got != 0 {
		t.Fatalf("Pid() = %d after Kill, want 0", got)
	}
	if err := tcpOpen(addr); err == nil {
		t.Fatalf("%s still accepts connections after Kill", addr)
	}
	p.Restart()
	if got := p.Pid(); got == 0 || got == pid {
		t.Fatalf("Pid() = %d after Restart, want a new process (was %d)", got, pid)
	}
	if err := ask(within(t, 10*time.Second)); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	// Restart of a running (here: paused) server kills it first.
	p.Pause()
	p.Restart()
	if err := ask(within(t, 10*time.Second)); err != nil {
		t.Fatalf("after Restart of a paused server: %v", err)
	}
}

func TestStartRedis(t *testing.T) {
	t.Parallel()
	s := StartRedis(t)
	rc := goredis.NewClient(&goredis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	if err := rc.Set(within(t, 5*time.Second), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	get := func(ctx context.Context) error { return rc.Get(ctx, "k").Err() }
	checkPauseResume(t, s.Process, get)
	ping := func(ctx context.Context) error { return rc.Ping(ctx).Err() }
	checkKillRestart(t, s.Process, s.Addr, ping)
	if err := get(within(t, 5*time.Second)); !errors.Is(err, goredis.Nil) {
		t.Errorf("GET after Restart without persistence: want redis.Nil, got %v", err)
	}
}

func TestStartRedisExtraArgs(t *testing.T) {
	t.Parallel()
	s := StartRedis(t, "--appendonly", "yes", "--maxmemory-policy", "noeviction")
	rc := goredis.NewClient(&goredis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	got, err := rc.ConfigGet(within(t, 5*time.Second), "maxmemory-policy").Result()
	if err != nil || got["maxmemory-policy"] != "noeviction" {
		t.Fatalf("maxmemory-policy = %v (%v), want noeviction", got, err)
	}
	if err := rc.Set(within(t, 5*time.Second), "k", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if v, err := rc.Get(within(t, 5*time.Second), "k").Result(); err != nil || v != "kept" {
		t.Fatalf("GET after Restart with --appendonly yes = %q, %v; want kept", v, err)
	}
}

func TestStartRedisTLS(t *testing.T) {
	t.Parallel()
	f := TLSFiles(t)
	args := f.RedisArgs(t, "no") // --port 0 --tls-port N ...
	s := StartRedis(t, args...)
	if want := "127.0.0.1:" + args[3]; s.Addr != want {
		t.Fatalf("Addr = %s, want the TLS port %s", s.Addr, want)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		TLSConfig: f.ClientConfig()})
	t.Cleanup(func() { _ = rc.Close() })
	ping := func(ctx context.Context) error { return rc.Ping(ctx).Err() }
	checkPauseResume(t, s.Process, ping)
	s.Restart()
	// The first PING may go out on a pooled connection the restart broke.
	eventually(t, 10*time.Second, "PING over TLS after Restart", func() error { return ping(within(t, 2*time.Second)) })
}

func TestStartFailureNamesTheLog(t *testing.T) {
	t.Parallel()
	Needs(t, "redis-server") // fails() would not see the skip
	msg := fails(t, func(tb testing.TB) { StartRedis(tb, "--no-such-directive", "x") })
	if !strings.Contains(msg, "exited before answering") || !strings.Contains(msg, "no-such-directive") {
		t.Fatalf("a redis-server that cannot start: want a failure quoting its log, got %q", msg)
	}
}

func TestPauseOfKilledServerFails(t *testing.T) {
	t.Parallel()
	Needs(t, "redis-server") // fails() would not see the skip
	var s *RedisServer
	msg := fails(t, func(tb testing.TB) {
		s = StartRedis(tb)
		s.Kill()
		s.Pause()
	})
	if !strings.Contains(msg, "not running") {
		t.Fatalf("Pause after Kill: want a failure saying it is not running, got %q", msg)
	}
}

func TestStartRedisCluster(t *testing.T) {
	t.Parallel()
	c := StartRedisCluster(t, 3)
	if len(c.Nodes) != 3 || len(c.Addrs) != 3 {
		t.Fatalf("%d nodes, %d addrs; want 3", len(c.Nodes), len(c.Addrs))
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cc.Close() })
	// Keys spread over every node.
	keys := make(map[string]bool)
	for i := 0; len(keys) < 30; i++ {
		keys[fmt.Sprintf("key-%d", i)] = true
	}
	owners := make(map[string]bool)
	for k := range keys {
		if err := cc.Set(within(t, 10*time.Second), k, "v-"+k, 0).Err(); err != nil {
			t.Fatalf("SET %s through the cluster client: %v", k, err)
		}
		if v, err := cc.Get(within(t, 10*time.Second), k).Result(); err != nil || v != "v-"+k {
			t.Fatalf("GET %s = %q, %v; want v-%s", k, v, err, k)
		}
		// The node that answers GET without a redirect holds the key.
		for _, a := range c.Addrs {
			if v, err := redisDo(a, "GET", k); err == nil && v == "v-"+k {
				owners[a] = true
			}
		}
	}
	if len(owners) != 3 {
		t.Errorf("30 keys live on %d nodes %v, want all 3: slots are not spread", len(owners), owners)
	}

	// A killed node comes back into the cluster from its nodes.conf.
	n := c.Nodes[1]
	n.Kill()
	n.Restart()
	for _, a := range c.Addrs {
		info, err := redisDo(a, "CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
			t.Fatalf("after a node's Restart, %s: CLUSTER INFO %q, %v; want ok with 3 nodes", a, info, err)
		}
	}
	eventually(t, 20*time.Second, "SET through the cluster after a node's Restart", func() error {
		for k := range keys {
			if err := cc.Set(within(t, 2*time.Second), k, "again", 0).Err(); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestStartZooKeeper(t *testing.T) {
	t.Parallel()
	z := StartZooKeeper(t, "-Dznode.container.checkIntervalMs=100")
	conn := zkConnect(t, z.Addr)
	if _, err := conn.Create("/testenv", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create: %v", err)
	}
	// Closed before the restarts: a client left connected retries every
	// second while the server is down, and one retry that lands between
	// the new server's binding its port and loading its data goes
	// unanswered for 10 x 2/3 of the session timeout (a ZooKeeper 3.8.0
	// defect; see StartZooKeeper). That is ZooKeeper's and go-zookeeper's behaviour,
	// not what this test checks.
	conn.Close()
	srvr := func(ctx context.Context) error {
		d, _ := ctx.Deadline()
		_, err := zkSrvr4LW(z.Addr, time.Until(d))
		return err
	}
	checkPauseResume(t, z.Process, srvr)
	checkKillRestart(t, z.Process, z.Addr, srvr)
	// Restart has returned, so the server serves: a new client reads at
	// once what was written before, from the data directory Restart keeps.
	conn = zkConnect(t, z.Addr)
	type got struct {
		b   []byte
		err error
	}
	ch := make(chan got, 1)
	go func() {
		b, _, err := conn.Get("/testenv")
		ch <- got{b, err}
	}()
	select {
	case g := <-ch:
		if g.err != nil || string(g.b) != "v" {
			t.Fatalf("get /testenv on a new client after Restart = %q, %v; want v", g.b, g.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("get /testenv on a new client after Restart: no answer within 20s")
	}
}

// zkConnect connects a go-zookeeper client to addr (a 10s session), closed
// when the test ends.
func zkConnect(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// zkSrvr4LW asks srvr with a deadline and returns the Mode.
func zkSrvr4LW(addr string, d time.Duration) (string, error) {
	var reply string
	err := talk(addr, d, func(c net.Conn, _ string) error {
		var err error
		reply, err = fourLetterWord(c, "srvr")
		return err
	})
	if err != nil {
		return "", err
	}
	if !strings.Contains(reply, "Mode: ") {
		return "", fmt.Errorf("srvr answered %q", reply)
	}
	return reply, nil
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

func TestStartZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	e := StartZooKeeperEnsemble(t, 3)
	if len(e.Nodes) != 3 || len(e.Addrs) != 3 {
		t.Fatalf("%d nodes, %d addrs; want 3", len(e.Nodes), len(e.Addrs))
	}
	leaders := 0
	for _, a := range e.Addrs {
		mode, err := zkSrvr(a)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if mode == "leader" {
			leaders++
		} else if mode != "follower" {
			t.Fatalf("%s: Mode %s, want leader or follower", a, mode)
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders, want 1", leaders)
	}
	leader := e.Leader()
	if mode, err := zkSrvr(e.Addrs[leader]); err != nil || mode != "leader" {
		t.Fatalf("Leader() = %d, but %s reports Mode %q (%v)", leader, e.Addrs[leader], mode, err)
	}

	// Kill the leader: the other two keep a quorum and take a write.
	e.Nodes[leader].Kill()
	var rest []string
	for i, a := range e.Addrs {
		if i != leader {
			rest = append(rest, a)
		}
	}
	conn, _, err := zk.Connect(rest, 10*time.Second, zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	eventually(t, 30*time.Second, "create on the two remaining nodes", func() error {
		_, err := conn.Create("/after-loss", []byte("ok"), 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	})
	newLeader := e.Leader()
	if newLeader == leader {
		t.Fatalf("Leader() = %d, the killed node", newLeader)
	}

	// The killed node rejoins and has the write.
	e.Nodes[leader].Restart()
	one, _, err := zk.Connect([]string{e.Addrs[leader]}, 10*time.Second, zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	eventually(t, 30*time.Second, "read on the restarted node", func() error {
		if _, err := one.Sync("/after-loss"); err != nil {
			return err
		}
		b, _, err := one.Get("/after-loss")
		if err == nil && string(b) != "ok" {
			return fmt.Errorf("/after-loss = %q, want ok", b)
		}
		return err
	})
}

func TestStartConsul(t *testing.T) {
	t.Parallel()
	c := StartConsul(t)
	client, err := consulapi.NewClient(&consulapi.Config{Address: c.Addr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.KV().Put(&consulapi.KVPair{Key: "testenv", Value: []byte("v")}, nil); err != nil {
		t.Fatalf("put: %v", err)
	}
	get := func(ctx context.Context) error {
		p, _, err := client.KV().Get("testenv", (&consulapi.QueryOptions{}).WithContext(ctx))
		if err == nil && (p == nil || string(p.Value) != "v") {
			return fmt.Errorf("testenv = %v, want v", p)
		}
		return err
	}
	checkPauseResume(t, c.Process, get)
	leader := func(ctx context.Context) error {
		l, err := client.Status().LeaderWithQueryOptions((&consulapi.QueryOptions{}).WithContext(ctx))
		if err == nil && l == "" {
			err = errors.New("no leader")
		}
		return err
	}
	checkKillRestart(t, c.Process, c.Addr, leader)
}

func TestStartConsulACL(t *testing.T) {
	t.Parallel()
	const token = "4b1c3c0f-8d6e-4a51-9c1e-0a2b3c4d5e6f"
	c := StartConsul(t, fmt.Sprintf(`acl { enabled = true
default_policy = "deny"
tokens { initial_management = %q } }`, token))
	anon, err := consulapi.NewClient(&consulapi.Config{Address: c.Addr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.KV().Put(&consulapi.KVPair{Key: "acl/x", Value: []byte("v")}, nil); err == nil {
		t.Fatalf("put without a token on an agent with default_policy deny: want permission denied, got nil (are the -hcl snippets passed?)")
	}
	root, err := consulapi.NewClient(&consulapi.Config{Address: c.Addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "put with the management token", func() error {
		_, err := root.KV().Put(&consulapi.KVPair{Key: "acl/x", Value: []byte("v")}, nil)
		return err
	})
}

func TestStartConsulCluster(t *testing.T) {
	t.Parallel()
	c := StartConsulCluster(t, 3)
	if len(c.Nodes) != 3 || len(c.Addrs) != 3 {
		t.Fatalf("%d nodes, %d addrs; want 3", len(c.Nodes), len(c.Addrs))
	}
	clients := make([]*consulapi.Client, 3)
	for i, a := range c.Addrs {
		cl, err := consulapi.NewClient(&consulapi.Config{Address: a})
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = cl
		peers, err := cl.Status().Peers()
		if err != nil || len(peers) != 3 {
			t.Fatalf("%s: peers %v (%v), want 3", a, peers, err)
		}
	}
	leader := c.Leader()
	if l, err := clients[leader].Status().Leader(); err != nil || l != c.raftAddr[leader] {
		t.Fatalf("Leader() = %d (%s), but it reports the leader %q (%v)", leader, c.raftAddr[leader], l, err)
	}

	// Kill the leader: the other two keep a quorum and take a write.
	c.Nodes[leader].Kill()
	a, b := (leader+1)%3, (leader+2)%3
	eventually(t, 30*time.Second, "put on a remaining server", func() error {
		_, err := clients[a].KV().Put(&consulapi.KVPair{Key: "after-loss", Value: []byte("ok")}, nil)
		return err
	})
	p, _, err := clients[b].KV().Get("after-loss", &consulapi.QueryOptions{RequireConsistent: true})
	if err != nil || p == nil || string(p.Value) != "ok" {
		t.Fatalf("consistent read on the other remaining server: %v, %v; want ok", p, err)
	}
	if nl := c.Leader(); nl == leader {
		t.Fatalf("Leader() = %d, the killed node", nl)
	}

	// The killed server rejoins with its data.
	c.Nodes[leader].Restart()
	c.Wait()
	p, _, err = clients[leader].KV().Get("after-loss", &consulapi.QueryOptions{RequireConsistent: true})
	if err != nil || p == nil || string(p.Value) != "ok" {
		t.Fatalf("consistent read on the restarted server: %v, %v; want ok", p, err)
	}
}

func TestStartMariaDB(t *testing.T) {
	t.Parallel()
	m := StartMariaDB(t, "--max-connections=77")
	if want := "root:@tcp(" + m.Addr + ")/test?parseTime=true"; m.DSN != want {
		t.Fatalf("DSN = %q, want %q", m.DSN, want)
	}
	db, err := sql.Open("mysql", m.DSN+"&timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var maxConns int
	if err := db.QueryRowContext(within(t, 10*time.Second), "SELECT @@max_connections").Scan(&maxConns); err != nil || maxConns != 77 {
		t.Fatalf("@@max_connections = %d (%v), want 77 from the extra argument", maxConns, err)
	}
	if _, err := db.ExecContext(within(t, 10*time.Second), "CREATE TABLE kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(within(t, 10*time.Second), "INSERT INTO kv VALUES ('k', 'v')"); err != nil {
		t.Fatal(err)
	}
	read := func(ctx context.Context) error {
		var v string
		if err := db.QueryRowContext(ctx, "SELECT v FROM kv WHERE k = 'k'").Scan(&v); err != nil {
			return err
		}
		if v != "v" {
			return fmt.Errorf("v = %q, want v", v)
		}
		return nil
	}
	checkPauseResume(t, m.Process, read)
	// Killed, the server keeps its committed row.
	checkKillRestart(t, m.Process, m.Addr, read)
}

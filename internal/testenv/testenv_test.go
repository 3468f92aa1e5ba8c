package testenv

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fakeTB records Fatalf instead of stopping the test, so the failure path of
// the helpers can be checked.
type fakeTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msg = fmt.Sprintf(format, args...)
}

// unshort makes the helpers act as without -short for the rest of the
// test: the tests that call them against fake servers run in a quick run
// too.
func unshort(t *testing.T) {
	t.Helper()
	short = func() bool { return false }
	t.Cleanup(func() { short = testing.Short })
}

// serve runs a one-shot-per-connection fake server on 127.0.0.1 and returns
// its address.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestRedisAddr(t *testing.T) {
	unshort(t)
	addr := serve(t, func(c net.Conn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		if strings.TrimSpace(line) == "PING" {
			io.WriteString(c, "+PONG\r\n")
		}
	})
	t.Setenv(RedisAddrEnv, addr)
	if got := RedisAddr(t); got != addr {
		t.Fatalf("RedisAddr = %q, want %q", got, addr)
	}
}

func TestZooKeeperAddr(t *testing.T) {
	unshort(t)
	addr := serve(t, func(c net.Conn) {
		b := make([]byte, 4)
		io.ReadFull(c, b)
		switch string(b) {
		case "srvr":
			io.WriteString(c, "srvr is not executed because it is not in the whitelist.\n")
		case "ruok":
			io.WriteString(c, "imok")
		}
	})
	t.Setenv(ZooKeeperAddrEnv, addr)
	if got := ZooKeeperAddr(t); got != addr {
		t.Fatalf("ZooKeeperAddr = %q, want %q", got, addr)
	}
}

func TestConsulAddrNoLeader(t *testing.T) {
	unshort(t)
	addr := serve(t, func(c net.Conn) {
		bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n\"\"")
	})
	t.Setenv(ConsulAddrEnv, addr)
	f := &fakeTB{TB: t}
	ConsulAddr(f)
	if !strings.Contains(f.msg, "no leader") {
		t.Fatalf("want a no-leader failure, got %q", f.msg)
	}
}

func TestMySQLDSN(t *testing.T) {
	unshort(t)
	addr := serve(t, func(c net.Conn) {
		payload := append([]byte{10}, "5.5.5-10.11.0-MariaDB\x00"...)
		c.Write(append([]byte{byte(len(payload)), 0, 0, 0}, payload...))
	})
	dsn := "root:@tcp(" + addr + ")/test?parseTime=true"
	t.Setenv(MySQLDSNEnv, dsn)
	if got := MySQLDSN(t); got != dsn {
		t.Fatalf("MySQLDSN = %q, want %q", got, dsn)
	}
}

func TestFailureNamesAddressAndStartCommand(t *testing.T) {
	unshort(t)
	addr := freeAddr(t)
	t.Setenv(RedisAddrEnv, addr)
	f := &fakeTB{TB: t}
	if got := RedisAddr(f); got != "" {
		t.Errorf("RedisAddr = %q after a failure, want \"\"", got)
	}
	for _, want := range []string{addr, RedisAddrEnv, "scripts/services.sh up", "make test"} {
		if !strings.Contains(f.msg, want) {
			t.Errorf("failure message lacks %q:\n%s", want, f.msg)
		}
	}
}

func TestRequireLoopback(t *testing.T) {
	// Pure checks: nothing is dialled.
	for _, addr := range []string{"127.0.0.1:6379", "127.0.0.2:1", "[::1]:2181", "localhost:8500"} {
		if err := requireLoopback(addr); err != nil {
			t.Errorf("requireLoopback(%q) = %v, want nil", addr, err)
		}
	}
	for _, addr := range []string{"10.0.0.1:6379", "192.168.1.1:3306", "db.example:3306", "0.0.0.0:1", "6379"} {
		if err := requireLoopback(addr); err == nil {
			t.Errorf("requireLoopback(%q) = nil, want an error", addr)
		}
	}
}

func TestMySQLAddr(t *testing.T) {
	for dsn, want := range map[string]string{
		"root:@tcp(127.0.0.1:3306)/test?parseTime=true": "127.0.0.1:3306",
		"u:p@ss@tcp(localhost:3307)/x":                  "localhost:3307",
		"tcp(127.0.0.1)/":                               "127.0.0.1:3306",
		"root:@tcp([::1]:3306)/test":                    "[::1]:3306",
	} {
		got, err := mysqlAddr(dsn)
		if err != nil || got != want {
			t.Errorf("mysqlAddr(%q) = %q, %v; want %q", dsn, got, err, want)
		}
	}
	if _, err := mysqlAddr("root@unix(/run/mysqld/mysqld.sock)/test"); err == nil {
		t.Error("a unix-socket DSN should be refused")
	}
}

// fakeRedis answers inline PING with +PONG and CLUSTER INFO with clusterInfo
// (as a bulk string), or with an error when clusterInfo is empty, as a Redis
// without cluster mode does.
func fakeRedis(t *testing.T, clusterInfo string) string {
	return serve(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch strings.ToUpper(strings.TrimSpace(line)) {
			case "PING":
				io.WriteString(c, "+PONG\r\n")
			case "CLUSTER INFO":
				if clusterInfo == "" {
					io.WriteString(c, "-ERR This instance has cluster support disabled\r\n")
				} else {
					fmt.Fprintf(c, "$%d\r\n%s\r\n", len(clusterInfo), clusterInfo)
				}
			default:
				io.WriteString(c, "-ERR unknown command\r\n")
			}
		}
	})
}

const clusterOK = "cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_known_nodes:3\r\n"

func TestRedisClusterAddrs(t *testing.T) {
	unshort(t)
	addrs := []string{fakeRedis(t, clusterOK), fakeRedis(t, clusterOK), fakeRedis(t, clusterOK)}
	t.Setenv(RedisClusterAddrsEnv, " "+strings.Join(addrs, " , ")+",")
	got := RedisClusterAddrs(t)
	if strings.Join(got, ",") != strings.Join(addrs, ",") {
		t.Fatalf("RedisClusterAddrs = %q, want %q", got, addrs)
	}
}

func TestRedisClusterAddrsFailures(t *testing.T) {
	unshort(t)
	ok := fakeRedis(t, clusterOK)
	for name, tc := range map[string]struct {
		addrs []string
		want  []string
	}{
		"state fail": {
			[]string{ok, ok2(t), fakeRedis(t, "cluster_state:fail\r\ncluster_slots_assigned:0\r\ncluster_known_nodes:1\r\n")},
			[]string{"cluster_state:fail", "1 known nodes", "0 of 16384"},
		},
		"not cluster mode": {
			[]string{ok, ok2(t), fakeRedis(t, "")},
			[]string{"cluster support disabled"},
		},
		"node down": {
			[]string{ok, ok2(t), freeAddr(t)},
			[]string{"is not answering"},
		},
		"too few": {
			[]string{ok, ok2(t)},
			[]string{"want at least 3"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(RedisClusterAddrsEnv, strings.Join(tc.addrs, ","))
			f := &fakeTB{TB: t}
			if got := RedisClusterAddrs(f); got != nil {
				t.Errorf("RedisClusterAddrs = %q after a failure, want nil", got)
			}
			for _, want := range append(tc.want, RedisClusterAddrsEnv) {
				if !strings.Contains(f.msg, want) {
					t.Errorf("failure message lacks %q:\n%s", want, f.msg)
				}
			}
			if name != "too few" && !strings.Contains(f.msg, "scripts/services.sh up") {
				t.Errorf("failure message lacks the start command:\n%s", f.msg)
			}
		})
	}
}

// ok2 is a second healthy cluster node (addresses must not repeat).
func ok2(t *testing.T) string { return fakeRedis(t, clusterOK) }

func TestRedlockAddrs(t *testing.T) {
	unshort(t)
	var addrs []string
	for range 5 {
		addrs = append(addrs, fakeRedis(t, ""))
	}
	t.Setenv(RedlockAddrsEnv, strings.Join(addrs, ","))
	got := RedlockAddrs(t)
	if strings.Join(got, ",") != strings.Join(addrs, ",") {
		t.Fatalf("RedlockAddrs = %q, want %q", got, addrs)
	}

	down := freeAddr(t)
	t.Setenv(RedlockAddrsEnv, strings.Join(append(addrs[:4:4], down), ","))
	f := &fakeTB{TB: t}
	if got := RedlockAddrs(f); got != nil {
		t.Errorf("RedlockAddrs = %q after a failure, want nil", got)
	}
	for _, want := range []string{down, RedlockAddrsEnv, "scripts/services.sh up"} {
		if !strings.Contains(f.msg, want) {
			t.Errorf("failure message lacks %q:\n%s", want, f.msg)
		}
	}
}

func TestSplitAddrs(t *testing.T) {
	got, err := splitAddrs(DefaultRedlockAddrs)
	if err != nil || len(got) != 5 {
		t.Errorf("splitAddrs(default redlock) = %q, %v; want five", got, err)
	}
	got, err = splitAddrs(DefaultRedisClusterAddrs)
	if err != nil || len(got) != 3 {
		t.Errorf("splitAddrs(default cluster) = %q, %v; want three", got, err)
	}
	for _, bad := range []string{"127.0.0.1", "127.0.0.1:1,127.0.0.1:1"} {
		if _, err := splitAddrs(bad); err == nil {
			t.Errorf("splitAddrs(%q) = nil error", bad)
		}
	}
}

func TestNonLoopbackListRefused(t *testing.T) {
	unshort(t)
	t.Setenv(RedlockAddrsEnv, freeAddr(t)+",10.0.0.1:6392,"+freeAddr(t))
	f := &fakeTB{TB: t}
	RedlockAddrs(f)
	if !strings.Contains(f.msg, "not a loopback address") {
		t.Fatalf("want a loopback failure, got %q", f.msg)
	}
}

// skipTB records SkipNow's message and ends the goroutine, as the real one
// ends the test.
type skipTB struct {
	testing.TB
	msg string
}

func (s *skipTB) Helper() {}

func (s *skipTB) Skipf(format string, args ...any) {
	s.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (s *skipTB) Fatalf(format string, args ...any) {
	s.msg = "Fatalf: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestShortSkips checks that under -short every kind of helper skips the
// test, naming the server and the command that starts it, before it
// probes or starts anything.
func TestShortSkips(t *testing.T) {
	short = func() bool { return true }
	t.Cleanup(func() { short = testing.Short })
	t.Setenv(RedisAddrEnv, freeAddr(t))
	for name, tc := range map[string]struct {
		call func(testing.TB)
		want string
	}{
		"RedisAddr":      {func(tb testing.TB) { RedisAddr(tb) }, "needs Redis;"},
		"MySQLDSN":       {func(tb testing.TB) { MySQLDSN(tb) }, "needs MySQL;"},
		"PostgresDSN":    {func(tb testing.TB) { PostgresDSN(tb) }, "needs PostgreSQL;"},
		"RedlockAddrs":   {func(tb testing.TB) { RedlockAddrs(tb) }, "needs Redis (Redlock node);"},
		"StartRedis":     {func(tb testing.TB) { StartRedis(tb) }, "needs redis-server;"},
		"StartMariaDB":   {func(tb testing.TB) { StartMariaDB(tb) }, "needs mariadbd or mysqld;"},
		"StartConsul":    {func(tb testing.TB) { StartConsul(tb) }, "needs a consul binary;"},
		"StartZooKeeper": {func(tb testing.TB) { StartZooKeeper(tb) }, "needs java;"},
	} {
		t.Run(name, func(t *testing.T) {
			s := &skipTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				tc.call(s)
			}()
			<-done
			for _, want := range []string{tc.want, "without -short", "scripts/services.sh up"} {
				if !strings.Contains(s.msg, want) {
					t.Errorf("%s under -short: message lacks %q: %q", name, want, s.msg)
				}
			}
		})
	}
}

// TestServersAnswer checks that every server the integration tests use
// answers where the CERBERUS_* variables say. Without one it fails naming
// the command that starts them; under -short it is skipped.
func TestServersAnswer(t *testing.T) {
	t.Run("Redis", func(t *testing.T) { RedisAddr(t) })
	t.Run("ZooKeeper", func(t *testing.T) { ZooKeeperAddr(t) })
	t.Run("Consul", func(t *testing.T) { ConsulAddr(t) })
	t.Run("MySQL", func(t *testing.T) { MySQLDSN(t) })
	t.Run("RedisCluster", func(t *testing.T) { RedisClusterAddrs(t) })
	t.Run("Redlock", func(t *testing.T) { RedlockAddrs(t) })
}

package testenv

import (
	"bufio"
	"fmt"
	"io"
	"net"
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

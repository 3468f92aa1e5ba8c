package testenv

import (
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: no free loopback port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// RedisServer is a redis-server of a test's own, for faults that must not
// disturb the shared server.
type RedisServer struct {
	// Addr is its loopback host:port.
	Addr string
	cmd  *exec.Cmd
	once sync.Once
}

// StartRedis starts a redis-server without persistence on a free loopback
// port, waits until it answers PING, and kills it when the test ends. The
// extra arguments are passed to redis-server. Without the binary the test
// fails naming the command that installs it.
func StartRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testenv: redis-server is not installed: run %s (it installs it): %v", StartCommand, err)
	}
	port := FreePort(t)
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, extra...)
	s := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), cmd: exec.Command(bin, args...)}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("testenv: starting redis-server: %v", err)
	}
	t.Cleanup(s.Kill)
	deadline := time.Now().Add(10 * time.Second)
	for !redisAnswers(s.Addr) {
		if time.Now().After(deadline) {
			t.Fatalf("testenv: private redis-server at %s did not answer", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// Kill stops the server at once, as a crash would. It is idempotent.
func (s *RedisServer) Kill() {
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
}

// redisAnswers reports whether a Redis server at addr answers PING.
func redisAnswers(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	return probeRedis(conn, addr) == nil
}

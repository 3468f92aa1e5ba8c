package redis

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// privateServer is a redis-server of the test's own, for faults that must
// not disturb the shared server.
type privateServer struct {
	addr string
	cmd  *exec.Cmd
}

// startServer starts redis-server on a free loopback port and stops it when
// the test ends.
func startServer(t *testing.T) *privateServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed: run scripts/services.sh up (it installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := &privateServer{addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	c := goredis.NewClient(&goredis.Options{Addr: s.addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("private redis-server at %s did not answer", s.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// kill stops the server at once, as a crash would.
func (s *privateServer) kill() {
	if s.cmd.Process != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

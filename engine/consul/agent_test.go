package consul_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// agent is a private `consul agent -dev` for tests that stop it.
type agent struct {
	addr string
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

// consulBinary finds the consul binary: on PATH, or where
// scripts/build-consul.sh caches it.
func consulBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("consul"); err == nil {
		return p
	}
	cache := os.Getenv("CERBERUS_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "cerberus")
	}
	version := os.Getenv("CONSUL_VERSION")
	if version == "" {
		version = "1.20.1"
	}
	p := filepath.Join(cache, "consul-"+version, "consul")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no consul binary on PATH or at %s: run scripts/services.sh up (it builds and caches one with scripts/build-consul.sh)", p)
	}
	return p
}

// freePorts returns n distinct free TCP ports on loopback.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// startAgent starts a private dev agent on free loopback ports and waits
// until it has a leader. It is killed when the test ends.
func startAgent(t *testing.T) *agent {
	t.Helper()
	bin := consulBinary(t)
	p := freePorts(t, 7)
	dir := t.TempDir()
	args := []string{"agent", "-dev",
		"-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-node", fmt.Sprintf("cerberus-test-%d-%d", os.Getpid(), p[0]),
		"-http-port", strconv.Itoa(p[0]), "-grpc-port", strconv.Itoa(p[1]),
		"-grpc-tls-port", strconv.Itoa(p[2]), "-dns-port", strconv.Itoa(p[3]),
		"-serf-lan-port", strconv.Itoa(p[4]), "-serf-wan-port", strconv.Itoa(p[5]),
		"-server-port", strconv.Itoa(p[6]),
		"-data-dir", dir, "-hcl", "disable_update_check = true", "-log-level", "warn",
	}
	a := &agent{addr: fmt.Sprintf("127.0.0.1:%d", p[0]), out: new(bytes.Buffer), done: make(chan struct{})}
	a.cmd = exec.Command(bin, args...)
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { _ = a.cmd.Wait(); close(a.done) }()
	t.Cleanup(a.stop)
	c := newClient(t, a.addr)
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		leader, err := c.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
		cancel()
		if err == nil && leader != "" {
			return a
		}
		select {
		case <-a.done:
			t.Fatalf("private consul agent exited: %s", a.out.String())
		default:
		}
		if time.Now().After(deadline) || i > 600 {
			t.Fatalf("private consul agent at %s has no leader after 60s (last error %v)", a.addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop kills the agent and waits for it to exit.
func (a *agent) stop() {
	select {
	case <-a.done:
		return
	default:
	}
	_ = a.cmd.Process.Kill()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
	}
}

package zookeeper_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// zkServer is a private standalone ZooKeeper for fault tests, started with
// the java command line scripts/services.sh uses, on its own loopback port
// and data dir. The shared server at CERBERUS_ZK_ADDR is never touched.
type zkServer struct {
	t    *testing.T
	jvm  []string // extra JVM flags
	dir  string
	addr string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
}

// zkClasspath is services.sh's classpath for the Debian zookeeper package.
var zkClasspath = []string{
	"/etc/zookeeper/conf",
	"/usr/share/java/zookeeper.jar",
	"/usr/share/java/slf4j-log4j12.jar",
	"/usr/share/java/log4j-1.2.jar",
}

// tickTime of the private server: sessions may last from 2 ticks (1s) up
// to maxSessionTimeout (30s).
const privateTick = 500 * time.Millisecond

// startServer starts a private ZooKeeper, with extra JVM flags (system
// properties) if given, and stops it when the test ends.
func startServer(t *testing.T, jvm ...string) *zkServer {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("java not found: install the ZooKeeper server with scripts/services.sh up")
	}
	for _, p := range zkClasspath[1:] {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s missing (%v): install the ZooKeeper server with scripts/services.sh up", p, err)
		}
	}
	_ = java
	port := freePort(t)
	s := &zkServer{t: t, jvm: jvm, dir: t.TempDir(), addr: fmt.Sprintf("127.0.0.1:%d", port)}
	cfg := fmt.Sprintf(`tickTime=%d
initLimit=10
syncLimit=5
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
maxClientCnxns=0
maxSessionTimeout=30000
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
`, privateTick.Milliseconds(), filepath.Join(s.dir, "data"), port)
	if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	s.start()
	return s
}

// start runs the server and waits until it serves, within a minute.
func (s *zkServer) start() {
	s.t.Helper()
	log, err := os.OpenFile(filepath.Join(s.dir, "zookeeper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	args := append([]string{"-Xmx256m", "-Dzookeeper.log.dir=" + s.dir,
		"-Dzookeeper.root.logger=INFO,CONSOLE", "-Dzookeeper.admin.enableServer=false"}, s.jvm...)
	args = append(args, "-cp", strings.Join(zkClasspath, ":"),
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(s.dir, "zoo.cfg"))
	cmd := exec.Command("java", args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		s.t.Fatalf("start private ZooKeeper: %v (install it with scripts/services.sh up)", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(time.Minute)
	for !serving(s.addr) {
		select {
		case <-done:
			s.t.Fatalf("private ZooKeeper exited; see %s", filepath.Join(s.dir, "zookeeper.log"))
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("private ZooKeeper at %s did not serve within a minute", s.addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort returns a loopback port nothing listens on, below the kernel's
// ephemeral range (32768 and up on Linux): while a server is down, a client
// dialling a port in that range can end up connected to itself, or another
// process's outgoing connection can take the port, and the server could not
// come back on it.
func freePort(t *testing.T) int {
	t.Helper()
	for range 200 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			_ = l.Close()
			return port
		}
	}
	t.Fatalf("no free loopback port in 20000-31999")
	return 0
}

// serving asks srvr and expects a "Mode:" line.
func serving(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return false
	}
	b := make([]byte, 4096)
	n, _ := c.Read(b)
	return strings.Contains(string(b[:n]), "Mode: ")
}

// kill stops the server at once (SIGKILL; SIGCONT first in case it is
// stopped) and waits for it to exit. Its data dir stays, so start brings
// back its sessions.
func (s *zkServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.t.Errorf("private ZooKeeper (pid %d) did not exit after SIGKILL", s.cmd.Process.Pid)
	}
	s.cmd = nil
}

// pause freezes the server (SIGSTOP): connections stay open but nothing
// answers, as in a partition.
func (s *zkServer) pause() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("SIGSTOP: %v", err)
	}
}

// resume undoes pause.
func (s *zkServer) resume() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("SIGCONT: %v", err)
	}
}

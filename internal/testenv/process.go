package testenv

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is one server process started by a Start function of this package
// (StartRedis, StartZooKeeper, StartConsul, StartMariaDB, StartPostgres,
// StartEtcd and the cluster variants). Every server type embeds one, so each
// has its methods: Pause, Resume, Kill, Restart, Pid and Log.
//
// The process runs in its own process group, so signals reach any children
// too; its output goes to a log file under the test's temporary directory,
// whose last lines are part of every failure message. It is killed when the
// test ends, and (Linux) when the test binary dies, so no server outlives the
// test process.
//
// Kill ends the whole process tree, children that left the group (as
// PostgreSQL's backends do) included, and Restart starts the server again
// only once its TCP ports bind again, retrying a start that fails because
// an old process's port, lock or shared memory was still held; see Kill
// and Restart.
//
// The methods fail the test that started the server, with t.Fatalf, when
// they cannot do what they say.
type Process struct {
	t     testing.TB
	name  string        // for messages: "redis-server at 127.0.0.1:21345"
	bin   string        // the executable
	args  []string      // its arguments, the same on every start
	log   string        // receives stdout and stderr, appended across restarts
	ready func() error  // nil once the server answers
	wait  time.Duration // how long a start waits for ready

	cred *syscall.Credential // the user the server runs as; nil: the test's own

	// ports are the loopback TCP ports the server listens on, and udp its
	// UDP ones: a start waits until each binds again (see Restart).
	ports, udp []int

	mu      sync.Mutex
	cmd     *exec.Cmd     // nil when not started or killed
	done    chan struct{} // closed when cmd has exited
	start   uint64        // the start time of cmd in /proc, 0 if unknown
	logFrom int64         // the size of the log before cmd was launched
	paused  bool
	// stopped is what Pause stopped beside the process group: the
	// processes that left it (PostgreSQL's backends each start a session
	// of their own), which Resume continues.
	stopped map[int]uint64
}

// newProcess prepares (does not start) a server process and registers its
// Kill with t.Cleanup. The log file is dir/log.
func newProcess(t testing.TB, name, bin string, args []string, dir, log string, wait time.Duration,
	ready func() error) *Process {
	t.Helper()
	p := &Process{t: t, name: name, bin: bin, args: args, log: filepath.Join(dir, log), wait: wait,
		ready: ready}
	t.Cleanup(p.Kill)
	return p
}

// Pause stops the server with SIGSTOP (its whole process group, and every
// process that descends from it but left the group, as PostgreSQL's
// backends do): its connections stay open but nothing answers, as in a
// network partition or a long garbage-collection pause. It returns once
// every thread of them has stopped. Pausing a paused server does nothing.
func (p *Process) Pause() {
	p.t.Helper()
	p.signal(syscall.SIGSTOP, "pause")
	p.mu.Lock()
	start := p.start
	p.mu.Unlock()
	tree := stopTree(p.Pid(), start, true, p.log)
	// kill(2) returns once one thread is told; the others stop a moment
	// later, and until then one of them may still answer a request.
	pid := p.Pid()
	_, done := p.current()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := groupStopped(pid)
		if err == nil {
			break
		}
		select {
		case <-done:
			p.t.Fatalf("testenv: the %s exited while being paused%s", p.name, p.tail())
			return
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("testenv: the %s did not stop within 10s of SIGSTOP: %v", p.name, err)
			return
		}
		time.Sleep(time.Millisecond)
	}
	p.mu.Lock()
	p.paused = true
	p.stopped = tree
	p.mu.Unlock()
}

// groupStopped returns nil when every thread of every process in process
// group pgid is stopped (state T in /proc), or an error naming one that is
// not.
func groupStopped(pgid int) error {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	found := false
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, group, ok := procStat(filepath.Join("/proc", e.Name(), "stat"))
		if !ok || group != pgid {
			continue
		}
		found = true
		if state == 'Z' || state == 'X' {
			continue
		}
		tasks, err := os.ReadDir(filepath.Join("/proc", e.Name(), "task"))
		if err != nil {
			continue // it has exited meanwhile
		}
		for _, task := range tasks {
			st, _, ok := procStat(filepath.Join("/proc", e.Name(), "task", task.Name(), "stat"))
			if ok && st != 'T' && st != 't' && st != 'Z' && st != 'X' {
				return fmt.Errorf("thread %s of pid %d is in state %c", task.Name(), pid, st)
			}
		}
	}
	if !found {
		return fmt.Errorf("no process in group %d", pgid)
	}
	return nil
}

// procStat reads the state and process group from a /proc stat file.
func procStat(path string) (state byte, pgrp int, ok bool) {
	info, ok := readProcStat(path)
	return info.state, info.pgrp, ok
}

// Resume continues a paused server with SIGCONT. Resuming a server that is
// not paused does nothing.
func (p *Process) Resume() {
	p.t.Helper()
	p.signal(syscall.SIGCONT, "resume")
	p.mu.Lock()
	tree := p.stopped
	p.paused, p.stopped = false, nil
	p.mu.Unlock()
	signalTree(tree, syscall.SIGCONT)
}

func (p *Process) signal(sig syscall.Signal, what string) {
	p.t.Helper()
	cmd, done := p.current()
	if cmd == nil {
		p.t.Fatalf("testenv: cannot %s the %s: it is not running", what, p.name)
		return
	}
	select {
	case <-done:
		p.t.Fatalf("testenv: cannot %s the %s: it has exited%s", what, p.name, p.tail())
		return
	default:
	}
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
		p.t.Fatalf("testenv: %s the %s (process group %d): %v", what, p.name, cmd.Process.Pid, err)
	}
}

// killWait bounds how long Kill waits for the killed processes to exit.
const killWait = 30 * time.Second

// Kill stops the server at once with SIGKILL, as a crash would, and waits
// until its whole process tree is gone. First it stops the server's
// process group with SIGSTOP, so that nothing forks any more, and collects
// every process that descends from it (by parent links in /proc, so also
// the children that left the group or session, as PostgreSQL's backends
// do), is in its group, or still writes to its log (so also the orphans of
// a server that has exited on its own); then it kills the group and each
// collected process, and waits (up to 30s) until the server has exited and
// each of the others is gone or a zombie. Once Kill returns, nothing of
// the server holds its ports, files, locks or shared memory any more. Its
// data stays for Restart. Killing a server that is not running does
// nothing. Every server is killed when its test ends.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, done, start := p.cmd, p.done, p.start
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	pid := cmd.Process.Pid
	alive := !closed(done)
	tree := stopTree(pid, start, alive, p.log)
	if alive {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Process.Kill() // in case it left its group
	}
	signalTree(tree, syscall.SIGKILL)
	deadline := time.Now().Add(killWait)
	select {
	case <-done:
	case <-time.After(killWait):
		p.t.Errorf("testenv: the %s (pid %d) did not exit within %v of SIGKILL", p.name, pid, killWait)
		return
	}
	if err := treeGone(tree, deadline); err != nil {
		p.t.Errorf("testenv: the %s (pid %d) was killed, but %v within %v of SIGKILL", p.name, pid, err,
			killWait)
		return
	}
	p.mu.Lock()
	if p.cmd == cmd {
		p.cmd, p.done, p.paused = nil, nil, false
	}
	p.mu.Unlock()
}

// closed reports whether ch is closed.
func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Restart kills the server if it runs (paused or not) as Kill does, so
// that none of its processes is left, waits until each of its TCP ports
// binds again, starts it again with the same command line, so on the same
// port(s) and with the same data directory, and waits until it answers as
// its Start function did. A start that exits before answering because a
// port, lock file or shared memory of an old process was still held (its
// log says so: "Address already in use", PostgreSQL's "pre-existing shared
// memory block", InnoDB's "Unable to lock ... error: 11", ...) is retried
// a few times within the start's wait, each retry noted in the server's
// log and the test's. Servers that are part of a cluster wait only as far
// as the nodes that run allow: see each cluster type.
func (p *Process) Restart() {
	p.t.Helper()
	p.Kill()
	p.launch()
	p.await()
}

// Pid returns the process id of the server, or 0 while it is not running
// (before Restart after a Kill). The process is also its process group.
func (p *Process) Pid() int {
	cmd, _ := p.current()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

// Log returns the path of the file that receives the server's output, kept
// across restarts.
func (p *Process) Log() string { return p.log }

func (p *Process) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// up reports whether the server has been started, has not exited, and is
// not paused: whether it can take part in its cluster.
func (p *Process) up() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.paused {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// launch waits until the server's ports bind (see awaitPorts), then
// starts the process without waiting for it to answer.
func (p *Process) launch() {
	p.t.Helper()
	p.awaitPorts()
	if err := os.MkdirAll(filepath.Dir(p.log), 0o755); err != nil {
		p.t.Fatalf("testenv: %s: %v", p.name, err)
		return
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatalf("testenv: %s: log file: %v", p.name, err)
		return
	}
	var logFrom int64
	if st, err := f.Stat(); err == nil {
		logFrom = st.Size()
	}
	fmt.Fprintf(f, "==== testenv: %s %s\n", time.Now().Format(time.RFC3339Nano),
		strings.Join(append([]string{p.bin}, p.args...), " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// The kernel kills the server if the test binary dies without
		// running its cleanups (a crash, or go test's timeout).
		Pdeathsig: syscall.SIGKILL,
		// Set after the user changes, so it holds for servers that refuse
		// to run as root too.
		Credential: p.cred,
	}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		p.t.Fatalf("testenv: starting the %s: %v", p.name, err)
		return
	}
	// Read before Wait can reap it: until then the pid is the server's.
	info, _ := procOf(cmd.Process.Pid)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.paused, p.start, p.logFrom = cmd, done, false, info.start, logFrom
	p.mu.Unlock()
}

// portWait bounds how long a start waits for the server's ports to bind.
const portWait = 30 * time.Second

// awaitPorts waits until each of the server's TCP (and UDP) ports can be
// bound on 127.0.0.1, as a new server must: Kill has ended the old
// processes, but the kernel may take a moment to release what they held.
// It fails the test when a port stays busy for portWait.
func (p *Process) awaitPorts() {
	p.t.Helper()
	deadline := time.Now().Add(portWait)
	for {
		err := p.portsBusy()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("testenv: cannot start the %s: %v for %v%s", p.name, err, portWait, p.tail())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// portsBusy returns nil if every port of the server binds, or an error
// naming one that does not.
func (p *Process) portsBusy() error {
	for _, port := range p.ports {
		if !portFree(port) {
			return fmt.Errorf("its TCP port 127.0.0.1:%d is in use", port)
		}
	}
	for _, port := range p.udp {
		c, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("its UDP port 127.0.0.1:%d is in use", port)
		}
		_ = c.Close()
	}
	return nil
}

// maxStartRetries bounds how often one start is retried (see Restart).
const maxStartRetries = 10

// await polls ready until it reports nil, failing the test if p.wait runs
// out, or if the process exits first for a reason other than a transient
// one (see transientStart), which it retries.
func (p *Process) await() {
	p.t.Helper()
	deadline := time.Now().Add(p.wait)
	for retry := 1; ; retry++ {
		exited, err := p.waitReady(deadline)
		if err == nil {
			return
		}
		if !exited {
			p.t.Fatalf("testenv: the %s did not answer within %v: %v%s", p.name, p.wait, err, p.tail())
			return
		}
		reason := p.transientReason()
		pause := time.Duration(retry) * 200 * time.Millisecond
		if reason == "" || retry > maxStartRetries || time.Now().Add(pause).After(deadline) {
			p.t.Fatalf("testenv: the %s exited before answering (last check: %v)%s", p.name, err, p.tail())
			return
		}
		p.noteRetry(fmt.Sprintf("the %s exited at start (%q); starting it again in %v (retry %d of %d)",
			p.name, reason, pause, retry, maxStartRetries))
		time.Sleep(pause)
		p.Kill() // whatever of it may be left
		p.launch()
	}
}

// waitReady calls ready every 50ms until it reports nil, the process
// exits (exited true), or deadline passes; it returns ready's last error.
func (p *Process) waitReady(deadline time.Time) (exited bool, err error) {
	_, done := p.current()
	for {
		err := p.ready()
		if err == nil {
			return false, nil
		}
		if closed(done) {
			return true, err
		}
		if time.Now().After(deadline) {
			return false, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// transientStart matches the log lines of a server that could not start
// because an old process's port, lock or shared memory was still held.
var transientStart = regexp.MustCompile(`(?i)address already in use|BindException|could not bind|` +
	`pre-existing shared memory block|Unable to lock [^\n]*error: 11|lock file [^\n]* already exists|` +
	`resource temporarily unavailable`)

// transientReason returns the first line of the log written since the
// last launch that transientStart matches, or "".
func (p *Process) transientReason() string {
	p.mu.Lock()
	from := p.logFrom
	p.mu.Unlock()
	f, err := os.Open(p.log)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	loc := transientStart.FindIndex(b)
	if loc == nil {
		return ""
	}
	start := bytes.LastIndexByte(b[:loc[0]], '\n') + 1
	end := bytes.IndexByte(b[loc[0]:], '\n')
	if end < 0 {
		end = len(b) - loc[0]
	}
	return strings.TrimSpace(string(b[start : loc[0]+end]))
}

// noteRetry writes msg to the server's log and the test's.
func (p *Process) noteRetry(msg string) {
	p.t.Helper()
	p.t.Logf("testenv: %s", msg)
	if f, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(f, "==== testenv: %s %s\n", time.Now().Format(time.RFC3339Nano), msg)
		_ = f.Close()
	}
}

// tail returns the last lines of the log, to append to a failure message.
func (p *Process) tail() string {
	return logTail(p.log, 25)
}

// logTail returns "\n\tlast lines of PATH:\n..." for a failure message.
func logTail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("\n\t(no log: %v)", err)
	}
	defer f.Close()
	const max = 16 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return fmt.Sprintf("\n\tlast lines of %s:\n\t\t%s", path, strings.Join(all, "\n\t\t"))
}

// Ports below the kernel's ephemeral range (32768 and up by default on
// Linux): while a server is down, a client dialling a port in that range can
// end up connected to itself, or another process's outgoing connection can
// take the port, and the server could not come back on it.
const (
	portLow  = 20000
	portHigh = 32000 // exclusive; lowered to the ephemeral range's start if that is lower
)

// handedOut remembers the ports FreePort gave this process, so two servers
// of the same test binary never get the same one, even while one is down.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: make(map[int]bool)}

// FreePort returns a loopback TCP port that nothing listens on, below the
// kernel's ephemeral port range (so a server killed and restarted can get
// its port back; see Process.Restart), and that FreePort has not returned
// before in this process.
func FreePort(t testing.TB) int {
	t.Helper()
	return freePort(t, portLow, portCeiling(), 0)
}

// freePort picks a free port in [lo, hi); if also is not 0, port+also must
// be free too (a Redis Cluster node's bus port).
func freePort(t testing.TB, lo, hi, also int) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 500 {
		port := lo + rand.IntN(hi-lo)
		if handedOut.ports[port] || (also != 0 && handedOut.ports[port+also]) {
			continue
		}
		if !portFree(port) || (also != 0 && !portFree(port+also)) {
			continue
		}
		if !reserve(port) || (also != 0 && !reserve(port+also)) {
			continue // another test process picked it a moment ago
		}
		handedOut.ports[port] = true
		if also != 0 {
			handedOut.ports[port+also] = true
		}
		return port
	}
	t.Fatalf("testenv: no free loopback port in %d-%d", lo, hi-1)
	return 0
}

// portLocks is a file on which each test process holds a write lock on one
// byte per port it was handed, so that test binaries running side by side
// (go test ./... runs packages in parallel) never pick the same port in the
// moment between checking it and their server binding it. The kernel drops
// the locks when the process exits.
var portLocks struct {
	once sync.Once
	f    *os.File
}

// reserve takes port's byte lock, or reports that another process holds
// it. Without the lock file it reserves nothing and says yes.
func reserve(port int) bool {
	portLocks.once.Do(func() {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "cerberus-test-ports.lock"),
			os.O_RDWR|os.O_CREATE, 0o666)
		if err == nil {
			portLocks.f = f
		}
	})
	if portLocks.f == nil {
		return true
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: int64(port), Len: 1}
	return syscall.FcntlFlock(portLocks.f.Fd(), syscall.F_SETLK, &lk) == nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// portCeiling is portHigh, or the start of the ephemeral range if that is
// lower (but leaving at least 1000 ports).
func portCeiling() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return portHigh
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return portHigh
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil || low >= portHigh || low < portLow+1000 {
		return portHigh
	}
	return low
}

// lookBinary finds an executable on PATH, also in the sbin directories a
// non-root PATH may lack, or fails the test naming what installs it. Under
// -short it skips the test: starting a server is not a quick run.
func lookBinary(t testing.TB, names ...string) string {
	t.Helper()
	Needs(t, strings.Join(names, " or "))
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
			p := filepath.Join(dir, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	t.Fatalf("testenv: %s is not installed: run %s (it installs it)", strings.Join(names, " or "),
		StartCommand)
	return ""
}

// tcpOpen reports whether something accepts TCP connections at addr.
func tcpOpen(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// talk dials addr, runs probe on the connection within timeout, and
// returns its error.
func talk(addr string, timeout time.Duration, probe func(net.Conn, string) error) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	return probe(c, addr)
}

// cacheDir is where scripts/build-consul.sh caches what it builds, and this
// package what it prepares once per machine: $CERBERUS_CACHE, else
// $XDG_CACHE_HOME/cerberus, else ~/.cache/cerberus.
func cacheDir() string {
	if c := os.Getenv("CERBERUS_CACHE"); c != "" {
		return c
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "cerberus")
}

package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ZooKeeperClasspath is the classpath of the Debian zookeeper package
// (zookeeperd), as scripts/services.sh uses it.
var ZooKeeperClasspath = []string{
	"/etc/zookeeper/conf",
	"/usr/share/java/zookeeper.jar",
	"/usr/share/java/slf4j-log4j12.jar",
	"/usr/share/java/log4j-1.2.jar",
}

// ZooKeeperTick is the tickTime of the private ZooKeeper servers: sessions
// may last from 2 ticks (1s) up to 30s (maxSessionTimeout).
const ZooKeeperTick = 500 * time.Millisecond

// zooKeeperWait bounds a start: a JVM on a loaded two-core machine is slow.
const zooKeeperWait = 90 * time.Second

// ZooKeeper is a ZooKeeper server of a test's own (QuorumPeerMain from the
// Debian package, as scripts/services.sh runs it), standalone or a node of a
// ZooKeeperEnsemble. Its Process methods pause, resume, kill and restart it.
type ZooKeeper struct {
	// Addr is its client host:port on loopback.
	Addr string
	// Dir holds its zoo.cfg, its data directory (data/, kept across
	// Restart, so sessions survive a short outage) and its log.
	Dir string
	*Process
}

// StartZooKeeper starts a standalone ZooKeeper server with tickTime
// ZooKeeperTick on a FreePort of loopback, with the extra JVM flags (system
// properties such as -Dznode.container.checkIntervalMs=100) if given, waits
// until it serves (the srvr four-letter word reports a Mode), and kills it
// when the test ends. The four-letter words srvr, ruok, stat, mntr and cons
// are allowed; the admin server is off. Without java or the ZooKeeper jars
// the test fails naming the command that installs them.
//
// While it starts (at first and on every Restart) the server binds its
// port a moment before it loads its data, up to seconds on a loaded
// machine, and ZooKeeper 3.8.0 (Debian's) leaves a client connection that
// arrives in that moment open and unanswered (its log shows the close
// failing on a NullPointerException). A go-zookeeper client that reconnects
// then waits 10 x 2/3 of its session timeout (67s for a 10s session) for
// the answer before it tries again. Once Start or Restart has returned the
// moment is over: a client made then connects at once.
func StartZooKeeper(t testing.TB, jvm ...string) *ZooKeeper {
	t.Helper()
	z := prepareZooKeeper(t, FreePort(t), "", jvm)
	z.launch()
	z.await()
	return z
}

// prepareZooKeeper writes the config of a server on clientPort (with
// ensemble lines and a myid when servers is not empty) and makes (does not
// start) its process.
func prepareZooKeeper(t testing.TB, clientPort int, servers string, jvm []string) *ZooKeeper {
	t.Helper()
	java := lookBinary(t, "java")
	for _, p := range ZooKeeperClasspath[1:] {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("testenv: the ZooKeeper server is not installed (%v): run %s (it installs zookeeperd)",
				err, StartCommand)
			return nil
		}
	}
	dir := t.TempDir()
	z := &ZooKeeper{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort)), Dir: dir}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
		return nil
	}
	cfg := fmt.Sprintf(`tickTime=%d
initLimit=10
syncLimit=5
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
maxClientCnxns=0
maxSessionTimeout=30000
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,stat,mntr,cons
%s`, ZooKeeperTick.Milliseconds(), data, clientPort, servers)
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatalf("testenv: %v", err)
		return nil
	}
	// The serial collector and the client compiler only: a JVM that
	// starts faster and leaves the CPUs to the tests (several servers may
	// share two cores).
	args := []string{"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.log.dir=" + dir, "-Dzookeeper.root.logger=INFO,CONSOLE",
		"-Dzookeeper.admin.enableServer=false"}
	args = append(args, jvm...)
	args = append(args, "-cp", strings.Join(ZooKeeperClasspath, ":"),
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
	z.Process = newProcess(t, "ZooKeeper at "+z.Addr, java, args, dir, "zookeeper.log", zooKeeperWait,
		func() error { return zkMode(z.Addr) })
	z.ports = []int{clientPort}
	return z
}

// zkMode returns nil when the server at addr serves: srvr reports a Mode.
func zkMode(addr string) error {
	_, err := zkSrvr(addr)
	return err
}

// zkSrvr returns the Mode the server at addr reports (standalone, leader,
// follower), or an error when it does not serve.
func zkSrvr(addr string) (string, error) {
	var reply string
	err := talk(addr, 2*time.Second, func(c net.Conn, _ string) error {
		var err error
		reply, err = fourLetterWord(c, "srvr")
		return err
	})
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(reply, "\n") {
		if mode, ok := strings.CutPrefix(strings.TrimSpace(l), "Mode: "); ok {
			return mode, nil
		}
	}
	if reply == "" {
		return "", fmt.Errorf("no reply to srvr")
	}
	return "", fmt.Errorf("srvr answered %q", firstLine(reply))
}

// ZooKeeperEnsemble is a ZooKeeper ensemble of a test's own: every node a
// ZooKeeper on loopback.
type ZooKeeperEnsemble struct {
	// Nodes are the servers; Nodes[i] has myid i+1.
	Nodes []*ZooKeeper
	// Addrs are their client addresses, Addrs[i] == Nodes[i].Addr: the
	// connect string of a client is strings.Join(Addrs, ",").
	Addrs []string

	t testing.TB
}

// StartZooKeeperEnsemble starts n (at least three) ZooKeeper servers as one
// ensemble on loopback (server.N=127.0.0.1:PEER:ELECTION lines, a myid in
// each data directory, tickTime ZooKeeperTick, quick re-elections), waits
// until every node serves and one of them is the leader, and kills them all
// when the test ends.
//
// A node's Restart waits until it serves when a quorum of nodes runs
// (counting it; a paused node does not count); otherwise it cannot, and
// Restart waits only until it answers srvr at all.
func StartZooKeeperEnsemble(t testing.TB, n int) *ZooKeeperEnsemble {
	t.Helper()
	if n < 3 {
		t.Fatalf("testenv: StartZooKeeperEnsemble(%d): an ensemble that survives the loss of a node "+
			"needs at least 3", n)
		return nil
	}
	e := &ZooKeeperEnsemble{t: t}
	var servers strings.Builder
	client, quorum, election := make([]int, n), make([]int, n), make([]int, n)
	for i := range n {
		client[i], quorum[i], election[i] = FreePort(t), FreePort(t), FreePort(t)
		fmt.Fprintf(&servers, "server.%d=127.0.0.1:%d:%d\n", i+1, quorum[i], election[i])
	}
	// Connecting to a stopped peer gives up after 2s, and a node retries
	// an election at most every 2s (the defaults are 5s and a minute).
	jvm := []string{"-Dzookeeper.cnxTimeout=2000",
		"-Dzookeeper.fastleader.maxNotificationInterval=2000"}
	for i := range n {
		z := prepareZooKeeper(t, client[i], servers.String(), jvm)
		if err := os.WriteFile(filepath.Join(z.Dir, "data", "myid"), []byte(strconv.Itoa(i+1)+"\n"),
			0o644); err != nil {
			t.Fatalf("testenv: %v", err)
			return nil
		}
		z.name = fmt.Sprintf("ZooKeeper node %d at %s", i+1, z.Addr)
		// The quorum port is bound by the leader only, the election
		// port by every node.
		z.ports = append(z.ports, quorum[i], election[i])
		addr := z.Addr
		z.ready = func() error {
			if !e.quorumUp() {
				_, err := zkAnswers(addr)
				return err
			}
			return zkMode(addr)
		}
		e.Nodes = append(e.Nodes, z)
		e.Addrs = append(e.Addrs, z.Addr)
	}
	e.Restart()
	return e
}

// zkAnswers returns the srvr reply of the server at addr, whatever it is.
func zkAnswers(addr string) (string, error) {
	var reply string
	err := talk(addr, 2*time.Second, func(c net.Conn, _ string) error {
		var err error
		reply, err = fourLetterWord(c, "srvr")
		if err == nil && reply == "" {
			err = fmt.Errorf("no reply to srvr")
		}
		return err
	})
	return reply, err
}

func (e *ZooKeeperEnsemble) quorumUp() bool {
	up := 0
	for _, z := range e.Nodes {
		if z.up() {
			up++
		}
	}
	return up > len(e.Nodes)/2
}

// Wait waits until every running node that is not paused serves and
// exactly one of them is the leader, for instance after a Resume or a
// Restart of a node. It fails the test if that takes over 90s (too few
// nodes run for a quorum).
func (e *ZooKeeperEnsemble) Wait() {
	e.t.Helper()
	e.leader(zooKeeperWait)
}

// Leader waits as Wait does and returns the index in Nodes of the leader.
func (e *ZooKeeperEnsemble) Leader() int {
	e.t.Helper()
	return e.leader(zooKeeperWait)
}

func (e *ZooKeeperEnsemble) leader(wait time.Duration) int {
	e.t.Helper()
	leader, err := poll(wait, 50*time.Millisecond, e.serving)
	if err != nil {
		e.t.Fatalf("testenv: the ZooKeeper ensemble %v has no leader served by every running node after "+
			"%v: %v", e.Addrs, wait, err)
		return -1
	}
	return leader
}

// serving checks that every node that is up serves and exactly one leads.
func (e *ZooKeeperEnsemble) serving() (int, error) {
	leader, up := -1, 0
	for i, z := range e.Nodes {
		if !z.up() {
			continue
		}
		up++
		mode, err := zkSrvr(z.Addr)
		if err != nil {
			return -1, fmt.Errorf("node %d at %s: %w", i+1, z.Addr, err)
		}
		switch {
		case mode == "leader" && leader >= 0:
			return -1, fmt.Errorf("nodes %d and %d both report Mode: leader", leader+1, i+1)
		case mode == "leader":
			leader = i
		case mode != "follower":
			return -1, fmt.Errorf("node %d at %s: Mode: %s", i+1, z.Addr, mode)
		}
	}
	if up <= len(e.Nodes)/2 {
		return -1, fmt.Errorf("only %d of %d nodes run", up, len(e.Nodes))
	}
	if leader < 0 {
		return -1, fmt.Errorf("no node reports Mode: leader")
	}
	return leader, nil
}

// Restart kills every node that runs, starts them all again with their
// data, and waits until every node serves and one leads.
func (e *ZooKeeperEnsemble) Restart() {
	e.t.Helper()
	restartAll(e.Nodes)
	e.Wait()
}

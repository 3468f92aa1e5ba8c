package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ConsulVersion is the Consul release scripts/build-consul.sh builds when
// CONSUL_VERSION is unset.
const ConsulVersion = "1.20.1"

// consulWait bounds a start.
const consulWait = 90 * time.Second

// ConsulBinary returns the path of the consul binary: on PATH, or where
// scripts/build-consul.sh caches it ($CERBERUS_CACHE, else
// $XDG_CACHE_HOME/cerberus, else ~/.cache/cerberus; then
// consul-$CONSUL_VERSION/consul, the version defaulting to ConsulVersion).
// Without one the test fails naming the command that builds it; under
// -short the test is skipped.
func ConsulBinary(t testing.TB) string {
	t.Helper()
	Needs(t, "a consul binary")
	if p, err := exec.LookPath("consul"); err == nil {
		return p
	}
	version := os.Getenv("CONSUL_VERSION")
	if version == "" {
		version = ConsulVersion
	}
	p := filepath.Join(cacheDir(), "consul-"+version, "consul")
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("testenv: no consul binary on PATH or at %s: run %s (it builds and caches one with "+
			"scripts/build-consul.sh)", p, StartCommand)
		return ""
	}
	return p
}

// Consul is a Consul agent of a test's own: a dev agent (StartConsul) or a
// server of a ConsulCluster. Its Process methods pause, resume, kill and
// restart it.
type Consul struct {
	// Addr is the host:port of its HTTP API on loopback.
	Addr string
	// Dir holds its data directory (data/, kept across Restart) and its
	// log.
	Dir string
	*Process
}

// consulPorts are the ports of one agent. DNS and gRPC are turned off.
type consulPorts struct{ http, serfLAN, serfWAN, server int }

func newConsulPorts(t testing.TB) consulPorts {
	t.Helper()
	return consulPorts{FreePort(t), FreePort(t), FreePort(t), FreePort(t)}
}

// tcp are the TCP ports the agent listens on.
func (p consulPorts) tcp() []int { return []int{p.http, p.serfLAN, p.serfWAN, p.server} }

// udp are its UDP ports: Serf gossips over both.
func (p consulPorts) udp() []int { return []int{p.serfLAN, p.serfWAN} }

// args are the command-line flags that place an agent on loopback and on
// these ports.
func (p consulPorts) args() []string {
	return []string{
		"-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-http-port", strconv.Itoa(p.http), "-serf-lan-port", strconv.Itoa(p.serfLAN),
		"-serf-wan-port", strconv.Itoa(p.serfWAN), "-server-port", strconv.Itoa(p.server),
		"-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
		"-hcl", "disable_update_check = true",
		// Every test client comes from 127.0.0.1: raise the per-client
		// connection limit (200 by default, then 429) like services.sh.
		"-hcl", "limits { http_max_conns_per_client = 1000 }",
		"-log-level", "info",
	}
}

// StartConsul starts a Consul dev agent (`consul agent -dev`, a single
// server that keeps its state in memory) on FreePorts of loopback, with the
// extra HCL snippets appended as -hcl flags (for example an acl { ... }
// block), waits until it has elected itself leader (GET /v1/status/leader,
// which needs no ACL token), and kills it when the test ends. DNS and gRPC
// are off. Without the binary (ConsulBinary) the test fails naming the
// command that builds it.
//
// Restart brings the agent back on the same ports, empty: dev mode keeps
// nothing on disk.
func StartConsul(t testing.TB, hcl ...string) *Consul {
	t.Helper()
	bin := ConsulBinary(t)
	ports := newConsulPorts(t)
	dir := t.TempDir()
	args := append([]string{"agent", "-dev",
		"-node", fmt.Sprintf("cerberus-test-%d-%d", os.Getpid(), ports.http),
		"-data-dir", filepath.Join(dir, "data")}, ports.args()...)
	for _, h := range hcl {
		args = append(args, "-hcl", h)
	}
	c := &Consul{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.http)), Dir: dir}
	c.Process = newProcess(t, "Consul dev agent at "+c.Addr, bin, args, dir, "consul.log", consulWait,
		func() error { _, err := consulLeader(c.Addr); return err })
	c.ports, c.udp = ports.tcp(), ports.udp()
	c.launch()
	c.await()
	return c
}

// consulHTTP is a client without keep-alive connections: nothing of it
// outlives a request, so leak checks in the tests stay quiet.
var consulHTTP = &http.Client{
	Timeout:   2 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// consulGet GETs path from the agent at addr and returns the body of a 200
// reply, or an error naming the status.
func consulGet(addr, path string) ([]byte, int, error) {
	resp, err := consulHTTP.Get("http://" + addr + path)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, resp.StatusCode, fmt.Errorf("GET %s: %s: %s", path, resp.Status,
			strings.TrimSpace(string(body)))
	}
	return body, resp.StatusCode, nil
}

// consulLeader returns the raft leader the agent at addr knows, or an error
// when it knows none.
func consulLeader(addr string) (string, error) {
	body, _, err := consulGet(addr, "/v1/status/leader")
	if err != nil {
		return "", err
	}
	var leader string
	if err := json.Unmarshal(body, &leader); err != nil {
		return "", fmt.Errorf("GET /v1/status/leader: %q: %w", body, err)
	}
	if leader == "" {
		return "", errors.New("no leader yet (GET /v1/status/leader returned \"\")")
	}
	return leader, nil
}

// ConsulCluster is a cluster of Consul servers of a test's own, on
// loopback.
type ConsulCluster struct {
	// Nodes are the servers.
	Nodes []*Consul
	// Addrs are their HTTP API addresses, Addrs[i] == Nodes[i].Addr.
	Addrs []string

	t        testing.TB
	raftAddr []string // each node's server RPC address, as /v1/status reports it
}

// StartConsulCluster starts n (at least three) Consul servers (`consul
// agent -server -bootstrap-expect n`, not dev mode) on loopback, each with
// its own ports and data directory, joined to each other with -retry-join,
// with raft_multiplier 1 (elections within a second or two) and autopilot's
// cleanup_dead_servers off (a killed server stays a raft peer until it is
// back). It waits until every node knows the same leader, lists n raft
// peers and answers a consistent read, and kills them all when the test
// ends.
//
// A node's Restart waits until the node knows a leader when a quorum of
// nodes runs (counting it; a paused node does not count); otherwise it
// cannot, and Restart waits only until its HTTP API answers.
func StartConsulCluster(t testing.TB, n int) *ConsulCluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("testenv: StartConsulCluster(%d): a cluster that survives the loss of a server needs "+
			"at least 3", n)
		return nil
	}
	bin := ConsulBinary(t)
	c := &ConsulCluster{t: t}
	ports := make([]consulPorts, n)
	for i := range ports {
		ports[i] = newConsulPorts(t)
		c.raftAddr = append(c.raftAddr, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i].server)))
	}
	for i, p := range ports {
		dir := t.TempDir()
		args := append([]string{"agent", "-server", "-bootstrap-expect", strconv.Itoa(n),
			"-node", fmt.Sprintf("cerberus-test-%d-%d-%d", os.Getpid(), p.http, i+1),
			"-advertise", "127.0.0.1", "-data-dir", filepath.Join(dir, "data"),
			"-retry-interval", "1s",
			"-hcl", "performance { raft_multiplier = 1 }",
			"-hcl", "autopilot { cleanup_dead_servers = false }",
		}, p.args()...)
		for j, q := range ports {
			if j != i {
				args = append(args, "-retry-join", net.JoinHostPort("127.0.0.1", strconv.Itoa(q.serfLAN)))
			}
		}
		s := &Consul{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p.http)), Dir: dir}
		addr := s.Addr
		s.Process = newProcess(t, fmt.Sprintf("Consul server %d at %s", i+1, s.Addr), bin, args, dir,
			"consul.log", consulWait,
			func() error {
				if !c.quorumUp() {
					_, code, err := consulGet(addr, "/v1/status/leader")
					if code != 0 {
						return nil // it answers
					}
					return err
				}
				_, err := consulLeader(addr)
				return err
			})
		s.ports, s.udp = p.tcp(), p.udp()
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	c.Restart()
	return c
}

func (c *ConsulCluster) quorumUp() bool {
	up := 0
	for _, s := range c.Nodes {
		if s.up() {
			up++
		}
	}
	return up > len(c.Nodes)/2
}

// Wait waits until every running node that is not paused knows the same
// leader, lists every node as a raft peer, and answers a consistent read,
// for instance after a Resume or a Restart of a node. It fails the test if
// that takes over 90s (too few nodes run for a quorum).
func (c *ConsulCluster) Wait() {
	c.t.Helper()
	c.leader()
}

// Leader waits as Wait does and returns the index in Nodes of the leader.
func (c *ConsulCluster) Leader() int {
	c.t.Helper()
	return c.leader()
}

func (c *ConsulCluster) leader() int {
	c.t.Helper()
	leader, err := poll(consulWait, 100*time.Millisecond, c.serving)
	if err != nil {
		c.t.Fatalf("testenv: the Consul cluster %v is not serving after %v: %v", c.Addrs, consulWait, err)
		return -1
	}
	return leader
}

// serving checks every node that is up: same leader, n peers, and a
// consistent KV read that gets a reply from the leader.
func (c *ConsulCluster) serving() (int, error) {
	leader, up := "", 0
	for i, s := range c.Nodes {
		if !s.up() {
			continue
		}
		up++
		l, err := consulLeader(s.Addr)
		if err != nil {
			return -1, fmt.Errorf("node %d at %s: %w", i+1, s.Addr, err)
		}
		if leader != "" && l != leader {
			return -1, fmt.Errorf("node %d at %s says the leader is %s, another node %s", i+1, s.Addr, l,
				leader)
		}
		leader = l
		body, _, err := consulGet(s.Addr, "/v1/status/peers")
		if err != nil {
			return -1, fmt.Errorf("node %d at %s: %w", i+1, s.Addr, err)
		}
		var peers []string
		if err := json.Unmarshal(body, &peers); err != nil {
			return -1, fmt.Errorf("node %d at %s: /v1/status/peers: %q: %w", i+1, s.Addr, body, err)
		}
		if len(peers) != len(c.Nodes) {
			return -1, fmt.Errorf("node %d at %s lists %d raft peers %v, want %d", i+1, s.Addr, len(peers),
				peers, len(c.Nodes))
		}
		// 404: no such key, answered by the leader after a barrier.
		if _, code, err := consulGet(s.Addr,
			"/v1/kv/cerberus-testenv-probe?consistent"); code != http.StatusNotFound && err != nil {
			return -1, fmt.Errorf("node %d at %s: %w", i+1, s.Addr, err)
		}
	}
	if up <= len(c.Nodes)/2 {
		return -1, fmt.Errorf("only %d of %d nodes run", up, len(c.Nodes))
	}
	for i, a := range c.raftAddr {
		if a == leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("the leader %s is none of the nodes %v", leader, c.raftAddr)
}

// Restart kills every node that runs, starts them all again with their
// data, and waits as Wait does.
func (c *ConsulCluster) Restart() {
	c.t.Helper()
	restartAll(c.Nodes)
	c.Wait()
}

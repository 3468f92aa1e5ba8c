package testenv

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EtcdAddrEnv names the variable EtcdAddr reads, as printed by
// `scripts/services.sh env`.
const EtcdAddrEnv = "CERBERUS_ETCD_ADDR"

// DefaultEtcdAddr is the etcd client address used when EtcdAddrEnv is unset.
const DefaultEtcdAddr = "127.0.0.1:2379"

// EtcdAddr returns the host:port of the etcd server's client API for tests,
// from CERBERUS_ETCD_ADDR (default 127.0.0.1:2379). It fails t unless GET
// /health answers that the member is healthy (it has a leader).
func EtcdAddr(t testing.TB) string {
	t.Helper()
	return lookup(t, "etcd", EtcdAddrEnv, DefaultEtcdAddr, probeEtcd)
}

// probeEtcd asks the client port's /health, which reports
// {"health":"true"} once the member has a leader and serves.
func probeEtcd(conn net.Conn, addr string) error {
	body, err := httpGet(conn, addr, "/health")
	if err != nil {
		return err
	}
	if !strings.Contains(body, `"health":"true"`) {
		return fmt.Errorf("GET /health: %s", strings.TrimSpace(body))
	}
	return nil
}

// etcdWait bounds a start of a private etcd server.
const etcdWait = 30 * time.Second

// Etcd is an etcd server of a test's own (the Debian etcd-server binary,
// as scripts/services.sh runs it), a single member on loopback. Its Process
// methods pause, resume, kill and restart it.
type Etcd struct {
	// Addr is its client host:port on loopback.
	Addr string
	// Dir holds its data directory (data/, kept across Restart) and its
	// log.
	Dir string
	*Process
}

// StartEtcd starts a single-member etcd server on two FreePorts of
// loopback (client and peer), waits until /health reports it healthy, and
// kills it when the test ends. Without the etcd binary the test fails
// naming the command that installs it.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	c := startEtcds(t, 1, nil)
	return c.Nodes[0]
}

// StartEtcdTLS is StartEtcd for a server that speaks only TLS on its
// client port, with f's server certificate, and requires a client
// certificate signed by f's CA (f.ClientCertFile).
func StartEtcdTLS(t testing.TB, f TLS) *Etcd {
	t.Helper()
	c := startEtcds(t, 1, &f)
	return c.Nodes[0]
}

// EtcdCluster is an etcd cluster of a test's own: every member an Etcd on
// loopback.
type EtcdCluster struct {
	// Nodes are the members; Addrs their client addresses, in order.
	Nodes []*Etcd
	Addrs []string
	t     testing.TB
}

// StartEtcdCluster starts an n-member etcd cluster (n at least 3) on
// loopback, waits until every member reports itself healthy (which needs
// a leader), and kills it when the test ends.
func StartEtcdCluster(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("testenv: StartEtcdCluster(%d): a cluster that survives the loss of a member needs "+
			"at least 3", n)
		return nil
	}
	return startEtcds(t, n, nil)
}

// startEtcds starts n members of one cluster, launched together (a member
// waits for a quorum of its peers before it serves); with f, their client
// ports speak only TLS.
func startEtcds(t testing.TB, n int, f *TLS) *EtcdCluster {
	t.Helper()
	bin := lookBinary(t, "etcd")
	c := &EtcdCluster{t: t}
	var initial []string
	peers, peerPorts := make([]string, n), make([]int, n)
	for i := range n {
		peerPorts[i] = FreePort(t)
		peers[i] = "http://127.0.0.1:" + strconv.Itoa(peerPorts[i])
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i]))
	}
	for i := range n {
		dir := t.TempDir()
		clientPort := FreePort(t)
		e := &Etcd{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort)), Dir: dir}
		scheme, probe := "http://", probeEtcd
		var extra []string
		if f != nil {
			scheme, probe = "https://", f.probeTLS(probeEtcd)
			extra = []string{"--cert-file", f.CertFile, "--key-file", f.KeyFile,
				"--trusted-ca-file", f.CAFile, "--client-cert-auth"}
		}
		args := append([]string{
			"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", scheme + e.Addr, "--advertise-client-urls", scheme + e.Addr,
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
		}, extra...)
		e.Process = newProcess(t, fmt.Sprintf("etcd member %d at %s", i, e.Addr), bin, args, dir, "etcd.log",
			etcdWait, func() error { return talk(e.Addr, 2*time.Second, probe) })
		e.ports = []int{clientPort, peerPorts[i]}
		c.Nodes, c.Addrs = append(c.Nodes, e), append(c.Addrs, e.Addr)
	}
	for _, e := range c.Nodes {
		e.launch()
	}
	for _, e := range c.Nodes {
		e.await()
	}
	return c
}

// Leader returns the index in Nodes of the member that leads now, from
// each running member's etcd_server_is_leader metric, waiting up to 30s
// for one to lead.
func (c *EtcdCluster) Leader() int {
	c.t.Helper()
	leader, err := poll(etcdWait, 50*time.Millisecond, func() (int, error) {
		for i, e := range c.Nodes {
			if !e.up() {
				continue
			}
			var leads bool
			err := talk(e.Addr, 2*time.Second, func(conn net.Conn, addr string) error {
				var err error
				leads, err = etcdLeads(conn, addr)
				return err
			})
			if err == nil && leads {
				return i, nil
			}
		}
		return -1, fmt.Errorf("no running member reports etcd_server_is_leader 1")
	})
	if err != nil {
		c.t.Fatalf("testenv: the etcd cluster %v: %v", c.Addrs, err)
		return -1
	}
	return leader
}

// etcdLeads reads the member's /metrics for etcd_server_is_leader.
func etcdLeads(conn net.Conn, addr string) (bool, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return false, err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return false, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_server_is_leader "); ok {
			return strings.TrimSpace(v) == "1", nil
		}
	}
	return false, fmt.Errorf("no etcd_server_is_leader in /metrics (%v)", sc.Err())
}

// probeTLS wraps probe so that it runs over a TLS connection that trusts
// f's CA and presents f's client certificate.
func (f TLS) probeTLS(probe func(net.Conn, string) error) func(net.Conn, string) error {
	return func(conn net.Conn, addr string) error {
		cfg := f.ClientConfig()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
		c := tls.Client(conn, cfg)
		if err := c.Handshake(); err != nil {
			return err
		}
		return probe(c, addr)
	}
}

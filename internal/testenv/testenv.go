// Package testenv tells tests where the real servers for integration tests
// are: Redis, ZooKeeper, Consul, MySQL, etcd and PostgreSQL, plus a Redis
// Cluster and a set of independent Redis servers for Redlock.
//
// Each helper reads its CERBERUS_* environment variable (falling back to the
// usual port on 127.0.0.1), checks within a couple of seconds that the server
// answers a small protocol-level probe, and otherwise fails the test with a
// message naming the address and the command that starts the servers
// (StartCommand). A missing server is a failure, never a silent skip.
//
// Under go test -short every helper that needs a server, whether one
// already running (RedisAddr, MySQLDSN, ...) or one the test starts
// (StartRedis, StartConsul, StartMariaDB, ...), skips the test instead, so
// that go test -short ./... is a quick run on a machine with nothing
// running.
//
// The probes are deliberately tiny (a TCP dial plus one request) and use only
// the standard library; the real clients are exercised by the tests
// themselves, e.g. the smoke tests in package integration.
//
// Only loopback addresses are accepted.
package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables read by the helpers, as printed by
// `scripts/services.sh env`.
const (
	RedisAddrEnv     = "CERBERUS_REDIS_ADDR"
	ZooKeeperAddrEnv = "CERBERUS_ZK_ADDR"
	ConsulAddrEnv    = "CERBERUS_CONSUL_ADDR"
	MySQLDSNEnv      = "CERBERUS_MYSQL_DSN"

	// Comma-separated lists of host:port.
	RedisClusterAddrsEnv = "CERBERUS_REDIS_CLUSTER_ADDRS"
	RedlockAddrsEnv      = "CERBERUS_REDLOCK_ADDRS"
)

// Defaults used when the environment variables are unset or empty.
const (
	DefaultRedisAddr     = "127.0.0.1:6379"
	DefaultZooKeeperAddr = "127.0.0.1:2181"
	DefaultConsulAddr    = "127.0.0.1:8500"
	DefaultMySQLDSN      = "root:@tcp(127.0.0.1:3306)/test?parseTime=true"

	// Three masters, no replicas.
	DefaultRedisClusterAddrs = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"
	// Five independent servers (no cluster, no replication).
	DefaultRedlockAddrs = "127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393,127.0.0.1:6394,127.0.0.1:6395"
)

// MinRedisClusterNodes and MinRedlockNodes are the fewest addresses the
// list helpers accept: a Redis Cluster needs three masters, and Redlock
// needs a majority that survives one lost server.
const (
	MinRedisClusterNodes = 3
	MinRedlockNodes      = 3
)

// StartCommand is what a failure message tells the reader to run (from the
// repository root) to start the servers.
const StartCommand = "scripts/services.sh up (or `make test`, which starts them and runs the tests)"

// ProbeTimeout bounds each server check: dial, request and reply.
const ProbeTimeout = 2 * time.Second

// short reports whether the tests run under -short; the package's own
// tests replace it.
var short = testing.Short

// Needs skips t under go test -short, naming the server the test needs and
// the command that starts it. Without -short it does nothing: a missing
// server then fails the test where it is looked up. Every helper here that
// needs a server calls it; a test calls it itself only when it reaches its
// servers some other way, or must not start at all in a quick run.
func Needs(t testing.TB, server string) {
	t.Helper()
	if short() {
		t.Skipf("testenv: needs %s; run without -short after %s", server, StartCommand)
	}
}

// RedisAddr returns the host:port of the Redis server for tests, from
// CERBERUS_REDIS_ADDR (default 127.0.0.1:6379). It fails t unless the server
// answers PING with PONG.
func RedisAddr(t testing.TB) string {
	t.Helper()
	return lookup(t, "Redis", RedisAddrEnv, DefaultRedisAddr, probeRedis)
}

// ZooKeeperAddr returns the host:port of the ZooKeeper server for tests, from
// CERBERUS_ZK_ADDR (default 127.0.0.1:2181). It fails t unless the server
// answers the srvr (or ruok) four-letter word as a serving ZooKeeper.
func ZooKeeperAddr(t testing.TB) string {
	t.Helper()
	return lookup(t, "ZooKeeper", ZooKeeperAddrEnv, DefaultZooKeeperAddr, probeZooKeeper)
}

// ConsulAddr returns the host:port of the Consul agent's HTTP API for tests,
// from CERBERUS_CONSUL_ADDR (default 127.0.0.1:8500). It fails t unless
// /v1/status/leader names a leader.
func ConsulAddr(t testing.TB) string {
	t.Helper()
	return lookup(t, "Consul", ConsulAddrEnv, DefaultConsulAddr, probeConsul)
}

// MySQLDSN returns the go-sql-driver/mysql DSN of the MySQL (or MariaDB)
// server for tests, from CERBERUS_MYSQL_DSN (default
// root:@tcp(127.0.0.1:3306)/test?parseTime=true). It fails t unless the
// server at the DSN's tcp(host:port) sends a MySQL handshake. Credentials and
// the database are not checked here.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	Needs(t, "MySQL")
	dsn := fromEnv(MySQLDSNEnv, DefaultMySQLDSN)
	addr, err := mysqlAddr(dsn)
	if err != nil {
		t.Fatalf("testenv: %s=%q: %v", MySQLDSNEnv, dsn, err)
		return ""
	}
	if err := check("MySQL", addr, probeMySQL); err != nil {
		t.Fatalf("%s", failure("MySQL", MySQLDSNEnv, addr, err))
		return ""
	}
	return dsn
}

// RedisClusterAddrs returns the addresses of the Redis Cluster's masters for
// tests, from CERBERUS_REDIS_CLUSTER_ADDRS (comma-separated; default
// 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003). It fails t unless there are
// at least three, each answers PING, and each reports cluster_state:ok in
// CLUSTER INFO.
func RedisClusterAddrs(t testing.TB) []string {
	t.Helper()
	return lookupList(t, "Redis Cluster node", RedisClusterAddrsEnv, DefaultRedisClusterAddrs,
		MinRedisClusterNodes, probeRedisCluster)
}

// RedlockAddrs returns the addresses of the independent Redis servers for
// Redlock tests, from CERBERUS_REDLOCK_ADDRS (comma-separated; default five:
// 127.0.0.1:6391 to 127.0.0.1:6395). It fails t unless there are at least
// three and each answers PING.
func RedlockAddrs(t testing.TB) []string {
	t.Helper()
	return lookupList(t, "Redis (Redlock node)", RedlockAddrsEnv, DefaultRedlockAddrs,
		MinRedlockNodes, probeRedis)
}

func lookupList(t testing.TB, server, env, def string, atLeast int,
	probe func(net.Conn, string) error) []string {
	t.Helper()
	Needs(t, server)
	list := fromEnv(env, def)
	addrs, err := splitAddrs(list)
	if err == nil && len(addrs) < atLeast {
		err = fmt.Errorf("%d address(es), want at least %d", len(addrs), atLeast)
	}
	for _, addr := range addrs {
		if err == nil {
			err = requireLoopback(addr)
		}
	}
	if err != nil {
		t.Fatalf("testenv: %s=%q: %v", env, list, err)
		return nil
	}
	for _, addr := range addrs {
		if err := check(server, addr, probe); err != nil {
			t.Fatalf("%s", failure(server, env, addr, err))
			return nil
		}
	}
	return addrs
}

// splitAddrs splits a comma-separated list of host:port, ignoring blanks.
func splitAddrs(list string) ([]string, error) {
	var addrs []string
	seen := make(map[string]bool)
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("bad address %q: %v", a, err)
		}
		if seen[a] {
			return nil, fmt.Errorf("address %q is listed twice", a)
		}
		seen[a] = true
		addrs = append(addrs, a)
	}
	return addrs, nil
}

func fromEnv(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

func lookup(t testing.TB, server, env, def string, probe func(net.Conn, string) error) string {
	t.Helper()
	Needs(t, server)
	addr := fromEnv(env, def)
	if err := check(server, addr, probe); err != nil {
		t.Fatalf("%s", failure(server, env, addr, err))
		return ""
	}
	return addr
}

func failure(server, env, addr string, err error) string {
	return fmt.Sprintf("testenv: %s is not answering at %s (%s): %v\n"+
		"\tstart the test servers with: %s\n"+
		"\tthen export their addresses: eval \"$(scripts/services.sh env)\"",
		server, addr, env, err, StartCommand)
}

// answered remembers the (kind, address) pairs that passed their probe, so a
// test binary probes each server once for each kind of server it is asked to
// be (a cluster node also answers a plain Redis PING, but not vice versa).
var answered sync.Map

type probed struct{ kind, addr string }

// check dials addr (loopback only) and runs probe on the connection, all
// within ProbeTimeout. kind names the server the probe expects.
func check(kind, addr string, probe func(net.Conn, string) error) error {
	key := probed{kind, addr}
	if _, ok := answered.Load(key); ok {
		return nil
	}
	if err := requireLoopback(addr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ProbeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	if err := probe(conn, addr); err != nil {
		return err
	}
	answered.Store(key, true)
	return nil
}

// requireLoopback refuses any host that is not localhost or a loopback IP:
// tests here must never reach beyond this machine.
func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bad address %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address; only 127.0.0.0/8, ::1 or localhost may be used",
		host)
}

// probeRedis sends an inline PING and expects +PONG.
func probeRedis(conn net.Conn, _ string) error {
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("no reply to PING: %w", err)
	}
	line = strings.TrimSpace(line)
	if line != "+PONG" {
		return fmt.Errorf("PING answered %q, want +PONG", line)
	}
	return nil
}

// probeRedisCluster sends PING, then CLUSTER INFO, and expects
// cluster_state:ok: the node is in cluster mode and the cluster serves every
// slot.
func probeRedisCluster(conn net.Conn, _ string) error {
	r := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, "PING\r\nCLUSTER INFO\r\n"); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("no reply to PING: %w", err)
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING answered %q, want +PONG", line)
	}
	info, err := readBulk(r)
	if err != nil {
		return fmt.Errorf("CLUSTER INFO: %w", err)
	}
	fields := make(map[string]string)
	for _, l := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			fields[k] = v
		}
	}
	switch state := fields["cluster_state"]; state {
	case "ok":
		return nil
	case "":
		return fmt.Errorf("CLUSTER INFO has no cluster_state: %q", firstLine(info))
	default:
		return fmt.Errorf("cluster_state:%s (%s known nodes, %s of 16384 slots assigned); the cluster "+
			"is not formed or has lost a node",
			state, fields["cluster_known_nodes"], fields["cluster_slots_assigned"])
	}
}

// readBulk reads one RESP bulk-string reply; an error reply becomes an error.
func readBulk(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("no reply: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "-"):
		return "", fmt.Errorf("server replied %q (is it a Redis in cluster mode?)", line[1:])
	case strings.HasPrefix(line, "$"):
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
	var n int
	if _, err := fmt.Sscanf(line[1:], "%d", &n); err != nil || n < 0 || n > 1<<20 {
		return "", fmt.Errorf("bad bulk length in %q", line)
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("short reply: %w", err)
	}
	return string(b[:n]), nil
}

// probeZooKeeper sends srvr, which reports "Mode: ..." only while the server
// serves requests. A server that has not whitelisted srvr is asked ruok.
func probeZooKeeper(conn net.Conn, addr string) error {
	reply, err := fourLetterWord(conn, "srvr")
	if err != nil {
		return err
	}
	switch {
	case strings.Contains(reply, "Mode: "):
		return nil
	case strings.Contains(reply, "not in the whitelist"):
		// One command per connection: ask ruok on a fresh one.
		return check4LW(addr, "ruok", "imok")
	case reply == "":
		return errors.New("no reply to the srvr four-letter word")
	default:
		return fmt.Errorf("srvr answered %q", firstLine(reply))
	}
}

func check4LW(addr, cmd, want string) error {
	conn, err := net.DialTimeout("tcp", addr, ProbeTimeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(ProbeTimeout)); err != nil {
		return err
	}
	reply, err := fourLetterWord(conn, cmd)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(reply, want) {
		return fmt.Errorf("%s answered %q, want %q", cmd, firstLine(reply), want)
	}
	return nil
}

func fourLetterWord(conn net.Conn, cmd string) (string, error) {
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", err
	}
	// The server closes the connection after its reply.
	b, err := io.ReadAll(io.LimitReader(conn, 64<<10))
	if err != nil && len(b) == 0 {
		return "", fmt.Errorf("no reply to the %s four-letter word: %w", cmd, err)
	}
	return string(b), nil
}

// probeConsul asks the HTTP API for the raft leader, which is "" until the
// agent has elected one.
func probeConsul(conn net.Conn, addr string) error {
	body, err := httpGet(conn, addr, "/v1/status/leader")
	if err != nil {
		return err
	}
	leader := strings.Trim(strings.TrimSpace(body), `"`)
	if leader == "" {
		return errors.New("consul has no leader yet (GET /v1/status/leader returned \"\")")
	}
	return nil
}

// httpGet sends GET path to the server at addr over conn and returns the
// first 4 KiB of the body of a 200 reply; any other status is an error.
func httpGet(conn net.Conn, addr, path string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return "", err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return "", fmt.Errorf("no HTTP reply to GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

// probeMySQL reads the server's greeting: a packet whose payload starts with
// protocol version 10, or an error packet (0xff) explaining why the server
// refuses us.
func probeMySQL(conn net.Conn, _ string) error {
	var hdr [4]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return fmt.Errorf("no MySQL handshake: %w", err)
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	if n == 0 || n > 1<<16 {
		return fmt.Errorf("no MySQL handshake: bad packet length %d", n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(conn, payload); err != nil {
		return fmt.Errorf("no MySQL handshake: %w", err)
	}
	switch payload[0] {
	case 10:
		return nil
	case 0xff:
		msg := ""
		if len(payload) > 3 {
			msg = string(payload[3:])
		}
		return fmt.Errorf("MySQL refused the connection: %s", msg)
	default:
		return fmt.Errorf("no MySQL handshake: protocol version %d", payload[0])
	}
}

// mysqlAddr extracts host:port from a go-sql-driver/mysql DSN of the form
// [user[:password]@]tcp(host:port)/dbname[?params].
func mysqlAddr(dsn string) (string, error) {
	i := strings.LastIndex(dsn, "@tcp(")
	rest := ""
	if i >= 0 {
		rest = dsn[i+len("@tcp("):]
	} else if strings.HasPrefix(dsn, "tcp(") {
		rest = dsn[len("tcp("):]
	} else {
		return "", errors.New("the DSN must name a TCP address: user:pass@tcp(host:port)/db")
	}
	j := strings.IndexByte(rest, ')')
	if j <= 0 {
		return "", errors.New("unterminated tcp(host:port) in the DSN")
	}
	addr := rest[:j]
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "3306")
	}
	return addr, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisServer is a redis-server of a test's own, for faults that must not
// disturb the shared server. Its Process methods pause, resume, kill and
// restart it.
type RedisServer struct {
	// Addr is its loopback host:port: the plain port, or the TLS port when
	// the extra arguments set --tls-port and --port 0.
	Addr string
	// Dir is its working directory (--dir), kept across Restart.
	Dir string
	*Process
}

// StartRedis starts a redis-server without persistence on a FreePort of
// loopback, waits until it answers PING, and kills it when the test ends.
// The extra arguments are passed to redis-server after the defaults
// (--port PORT --bind 127.0.0.1 --save "" --appendonly no --dir DIR), so
// they override them. When they set --tls-port N and --port 0, Addr is
// 127.0.0.1:N and the wait is for the TLS port to accept connections
// instead of for PING. Without the binary the test fails naming the command
// that installs it.
//
// Restart brings the server back on the same port and dir, empty unless
// the extra arguments turn persistence on (--appendonly yes).
func StartRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	s := prepareRedis(t, FreePort(t), extra)
	s.launch()
	s.await()
	return s
}

// prepareRedis makes (does not start) a redis-server on port with the
// extra arguments.
func prepareRedis(t testing.TB, port int, extra []string) *RedisServer {
	t.Helper()
	bin := lookBinary(t, "redis-server")
	dir := t.TempDir()
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir}, extra...)
	plain, tlsPort := strconv.Itoa(port), ""
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--port":
			plain = args[i+1]
		case "--tls-port":
			tlsPort = args[i+1]
		case "--dir":
			dir = args[i+1]
		}
	}
	s := &RedisServer{Addr: net.JoinHostPort("127.0.0.1", plain), Dir: dir}
	ready := func() error { return talk(s.Addr, time.Second, probeRedis) }
	if tlsPort != "" && plain == "0" {
		s.Addr = net.JoinHostPort("127.0.0.1", tlsPort)
		ready = func() error { return tcpOpen(s.Addr) }
	}
	s.Process = newProcess(t, "redis-server at "+s.Addr, bin, args, dir, "redis.log", 30*time.Second,
		ready)
	s.ports = redisPorts(args)
	return s
}

// redisPorts returns the TCP ports a redis-server with these arguments
// listens on: its plain and TLS ports (unless 0), and with
// --cluster-enabled yes its cluster bus port (--cluster-port, by default
// the plain port, or else the TLS port, plus 10000). Later arguments
// override earlier ones, as redis-server reads them.
func redisPorts(args []string) []int {
	opt := make(map[string]int)
	cluster := false
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--port", "--tls-port", "--cluster-port":
			n, _ := strconv.Atoi(args[i+1])
			opt[args[i]] = n
		case "--cluster-enabled":
			cluster = args[i+1] == "yes"
		}
	}
	var ports []int
	for _, k := range []string{"--port", "--tls-port"} {
		if opt[k] > 0 {
			ports = append(ports, opt[k])
		}
	}
	if cluster && len(ports) > 0 {
		bus := opt["--cluster-port"]
		if bus <= 0 {
			bus = ports[0] + 10000
		}
		ports = append(ports, bus)
	}
	return ports
}

// redisDo sends one command to the Redis server at addr on a connection of
// its own and returns the reply: a simple string, bulk string or integer as
// a string; an error reply as an error.
func redisDo(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: no reply: %w", args[0], err)
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case line == "":
		return "", fmt.Errorf("%s: empty reply", args[0])
	case line[0] == '+' || line[0] == ':':
		return line[1:], nil
	case line[0] == '-':
		return "", fmt.Errorf("%s: %s", args[0], line[1:])
	case line[0] == '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > 1<<20 {
			return "", fmt.Errorf("%s: bad reply %q", args[0], line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", fmt.Errorf("%s: short reply: %w", args[0], err)
		}
		return string(buf[:n]), nil
	default:
		return "", errors.New(args[0] + ": unexpected reply " + strconv.Quote(line))
	}
}

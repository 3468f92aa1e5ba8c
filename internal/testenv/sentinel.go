package testenv

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelMaster is the master name StartRedisSentinel monitors.
const SentinelMaster = "cerberus"

// RedisSentinel is a Redis Sentinel of a test's own. Its Process methods
// pause, resume, kill and restart it.
type RedisSentinel struct {
	// Addr is its TCP host:port on loopback.
	Addr string
	*Process
}

// StartRedisSentinel starts a Redis Sentinel (redis-server --sentinel) on
// a FreePort of 127.0.0.1 that monitors the master at master (host:port,
// which may be a fault proxy in front of the server) under the name
// SentinelMaster with a quorum of one, waits until it reports that master,
// and kills it when the test ends.
func StartRedisSentinel(t testing.TB, master string) *RedisSentinel {
	t.Helper()
	bin := lookBinary(t, "redis-server")
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		t.Fatalf("testenv: sentinel master %q: %v", master, err)
		return nil
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	sport := FreePort(t)
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\n"+
		"sentinel down-after-milliseconds %s 5000\n", sport, dir, SentinelMaster, host, port, SentinelMaster)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatalf("testenv: %v", err)
		return nil
	}
	s := &RedisSentinel{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))}
	s.Process = newProcess(t, "redis sentinel at "+s.Addr, bin, []string{conf, "--sentinel"}, dir,
		"sentinel.log", 30*time.Second, func() error {
			return talk(s.Addr, time.Second, func(conn net.Conn, _ string) error {
				return probeSentinel(conn, master)
			})
		})
	s.ports = []int{sport}
	s.launch()
	s.await()
	return s
}

// probeSentinel asks for SentinelMaster's address and expects master.
func probeSentinel(conn net.Conn, master string) error {
	if _, err := io.WriteString(conn, "SENTINEL get-master-addr-by-name "+SentinelMaster+"\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("no reply: %w", err)
	}
	if strings.TrimSpace(head) != "*2" {
		return fmt.Errorf("get-master-addr-by-name answered %q", strings.TrimSpace(head))
	}
	host, err := readBulk(r)
	if err != nil {
		return err
	}
	port, err := readBulk(r)
	if err != nil {
		return err
	}
	if got := net.JoinHostPort(host, port); got != master {
		return fmt.Errorf("the sentinel reports master %s, want %s", got, master)
	}
	return nil
}

package redis

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// startSentinel starts a Redis Sentinel of the test's own that monitors
// master under the name "cerberus", and returns its address.
func startSentinel(t *testing.T, master *privateServer) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed: run scripts/services.sh up (it installs it): %v", err)
	}
	port := testenv.FreePort(t)
	host, mport, _ := net.SplitHostPort(master.addr)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := "port " + strconv.Itoa(port) + "\nbind 127.0.0.1\ndir " + dir + "\n" +
		"sentinel monitor cerberus " + host + " " + mport + " 1\n" +
		"sentinel down-after-milliseconds cerberus 5000\n"
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := goredis.NewSentinelClient(&goredis.Options{Addr: addr})
	defer s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.GetMasterAddrByName(context.Background(), "cerberus").Result()
		if err == nil && len(got) == 2 && net.JoinHostPort(got[0], got[1]) == master.addr {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel at %s does not report the master %s: %v %v", addr, master.addr, got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSentinelConformance runs the suite through go-redis's Sentinel
// failover client: the engine's Client interface covers it as it is.
func TestSentinelConformance(t *testing.T) {
	master := startServer(t)
	sentinel := startSentinel(t, master)
	failover := func(sentinel string, denied bool) Client {
		o := &goredis.FailoverOptions{MasterName: "cerberus", SentinelAddrs: []string{sentinel}}
		if denied { // the master refuses; the sentinel needs no password
			s := strangerOptions(goredis.Options{})
			o.Username, o.Password = s.Username, s.Password
		}
		c := goredis.NewFailoverClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	admin := failover(sentinel, false).(*goredis.Client)
	probe := mustEngine(t, admin)
	enginetest.Run(t, func() (engine.Engine, error) {
		return New(failover(sentinel, false))
	}, withLeftovers(faultHooks(sentinel, failover), leftovers(admin, probe)))
}

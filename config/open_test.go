package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/internal/testenv"
)

// writeTwoEngines writes a config with a Redis and a ZooKeeper engine.
func writeTwoEngines(t *testing.T, ext, active string) string {
	t.Helper()
	redis, zk := testenv.RedisAddr(t), testenv.ZooKeeperAddr(t)
	path := filepath.Join(t.TempDir(), "cerberus"+ext)
	body := "# the lock engines, primary first\n" +
		"engines:\n" +
		"  - {name: primary, kind: redis, addrs: [\"" + redis + "\"], prefix: \"open-test:\"}\n" +
		"  - {name: secondary, kind: zookeeper, addrs: [\"" + zk + "\"]}\n" +
		"engine: " + active + "\n" +
		"health: {interval: 100ms, threshold: 2}\n" +
		"lease: {watchdog: 1s}\n" // the fence then waits at most 1s after a switch
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOpenFollowsTheFile: a running Service switches engines when an
// operator pins another one in the file, and its leases on the old engine
// end with ErrEngineSwitched.
func TestOpenFollowsTheFile(t *testing.T) {
	path := writeTwoEngines(t, ".yaml", "primary")
	s, err := Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := s.Client.Lock(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if s.Failover.Active() != "primary" {
		t.Fatalf("active %s, want primary", s.Failover.Active())
	}
	if err := SetEngine(path, "secondary"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the service did not follow the edited file (active %s)", s.Failover.Active())
	}
	if s.Failover.Active() != "secondary" || !strings.Contains(l.Err().Error(), "engine switched") {
		t.Fatalf("after the edit: active %s, lease err %v", s.Failover.Active(), l.Err())
	}
	data, _ := os.ReadFile(path)
	if !strings.Contains(string(data), "# the lock engines, primary first") || !strings.Contains(string(data), `engine: "secondary"`) {
		t.Fatalf("SetEngine changed more than the engine line:\n%s", data)
	}
	l2, err := s.Client.Lock(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token after the switch %d, want > %d", l2.Token(), l.Token())
	}
	_ = l2.Unlock(ctx)
}

func TestSetEngineRefusesUnknownNames(t *testing.T) {
	path := writeTwoEngines(t, ".yaml", "primary")
	before, _ := os.ReadFile(path)
	if err := SetEngine(path, "nope"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetEngine(nope): %v, want ErrInvalid", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("a refused SetEngine changed the file")
	}
	if err := SetEngine(path, ""); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil || cfg.Active != "" {
		t.Fatalf("after unpinning: %v, engine %q", err, cfg.Active)
	}
}

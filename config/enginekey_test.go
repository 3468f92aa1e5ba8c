package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestEngineKeyFlipsTheFleet: with engine_key set, the Consul key's value
// pins the engine for every Service, ahead of the file.
func TestEngineKeyFlipsTheFleet(t *testing.T) {
	key := fmt.Sprintf("cerberus-test/engine-key/%d", time.Now().UnixNano())
	path := filepath.Join(t.TempDir(), "cerberus.yaml")
	body := fmt.Sprintf(`engines:
  - {name: primary, kind: redis, addrs: ["%s"], prefix: "enginekey-test:"}
  - {name: secondary, kind: zookeeper, addrs: ["%s"]}
engine: primary
health: {interval: 100ms, threshold: 2}
lease: {watchdog: 1s}
engine_key: {consul: "%s", key: "%s"}
`, testenv.RedisAddr(t), testenv.ZooKeeperAddr(t), testenv.ConsulAddr(t), key)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() { _ = SetEngineKey(context.Background(), cfg, "") })
	var services []*Service
	for range 3 {
		s, err := Open(ctx, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		services = append(services, s)
	}
	waitActive := func(want string) {
		t.Helper()
		for i, s := range services {
			for deadline := time.Now().Add(20 * time.Second); s.Failover.Active() != want; {
				if time.Now().After(deadline) {
					t.Fatalf("service %d: active %s, want %s", i, s.Failover.Active(), want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	if err := SetEngineKey(ctx, cfg, "secondary"); err != nil {
		t.Fatal(err)
	}
	waitActive("secondary")
	// A file edit (here: pinning primary in the file) does not override
	// the fleet's key.
	if err := SetEngine(path, "primary"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let the reload happen; the check is that nothing moved
	waitActive("secondary")
	if err := SetEngineKey(ctx, cfg, "primary"); err != nil {
		t.Fatal(err)
	}
	waitActive("primary")
	if err := SetEngineKey(ctx, cfg, "nope"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetEngineKey(nope): %v", err)
	}
}

func TestEngineKeyValidation(t *testing.T) {
	_, err := Parse([]byte(`engines: [{name: m, kind: memory}]
engine_key: {consul: "nohost", key: "/abs"}
`), "yaml")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "engine_key.consul:") || !strings.Contains(err.Error(), "engine_key.key:") {
		t.Fatalf("bad engine_key: %v", err)
	}
}

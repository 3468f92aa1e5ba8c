package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/config"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// twoEngineConfig writes a configuration with a Redis primary and a
// ZooKeeper secondary, short health checks and short leases.
func twoEngineConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cerberus.yaml")
	body := fmt.Sprintf(`engines:
  - {name: primary, kind: redis, addrs: ["%s"], prefix: "ops-test:"}
  - {name: secondary, kind: zookeeper, addrs: ["%s"]}
engine: primary
health: {interval: 100ms, threshold: 2}
lease: {watchdog: 1s}
`, testenv.RedisAddr(t), testenv.ZooKeeperAddr(t))
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStatusAndUse(t *testing.T) {
	path := twoEngineConfig(t)
	code, out, errOut := runCmd(t, "status", "-config", path)
	if code != 0 || !strings.Contains(out, "primary") || !strings.Contains(out, "secondary") || strings.Count(out, " up ") != 2 || !strings.Contains(out, "* (pinned)") {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := runCmd(t, "use", "-config", path, "secondary"); code != 0 || !strings.Contains(out, "pinned secondary") {
		t.Fatalf("use secondary: exit %d: %s", code, out)
	}
	if cfg, err := config.Load(path); err != nil || cfg.Engine != "secondary" {
		t.Fatalf("after use: %v, engine %q", err, cfg.Engine)
	}
	if code, _, errOut := runCmd(t, "use", "-config", path, "nope"); code != 1 || !strings.Contains(errOut, "not a configured engine") {
		t.Fatalf("use nope: exit %d: %s", code, errOut)
	}
}

// TestOperatorFlipReachesEveryProcess: four processes lock through the same
// configuration file; an operator pins the secondary engine in it, and all
// four move there. It reports how long each took.
func TestOperatorFlipReachesEveryProcess(t *testing.T) {
	path := twoEngineConfig(t)
	type event struct {
		worker int
		name   string
		at     time.Time
	}
	events := make(chan event, 64)
	const workers = 4
	key := fmt.Sprintf("ops-flip/%d", time.Now().UnixNano())
	var cmds []*exec.Cmd
	for i := range workers {
		cmd := exec.Command(os.Args[0], configWorkerCommand, "-config", path, "-key", key, "-for", "60s")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if name, at, ok := splitActive(sc.Text()); ok {
					events <- event{i, name, at}
				}
			}
		}()
	}
	wait := func(name string) map[int]time.Time {
		t.Helper()
		seen := map[int]time.Time{}
		deadline := time.After(30 * time.Second)
		for len(seen) < workers {
			select {
			case ev := <-events:
				if ev.name == name {
					seen[ev.worker] = ev.at
				}
			case <-deadline:
				t.Fatalf("only %d of %d processes got a lease on %s", len(seen), workers, name)
			}
		}
		return seen
	}
	wait("primary")
	flipped := time.Now()
	if err := config.SetEngine(path, "secondary"); err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	for w, at := range wait("secondary") {
		d := at.Sub(flipped)
		slowest = max(slowest, d)
		t.Logf("process %d: first lease on secondary %v after the edit", w, d.Round(time.Millisecond))
	}
	t.Logf("all %d processes switched; the slowest %v after the edit (this includes the 1s fence)", workers, slowest.Round(time.Millisecond))
}

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	if cfg, err := config.Load(path); err != nil || cfg.Active != "secondary" {
		t.Fatalf("after use: %v, engine %q", err, cfg.Active)
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

// fleetConfig writes a two-engine configuration with an engine key of its
// own on the shared Consul agent.
func fleetConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cerberus.yaml")
	key := fmt.Sprintf("cerberus-test/ctl-fleet/%d", time.Now().UnixNano())
	body := fmt.Sprintf(`engines:
  - {name: primary, kind: redis, addrs: ["%s"], prefix: "ops-fleet:"}
  - {name: secondary, kind: zookeeper, addrs: ["%s"]}
health: {interval: 100ms, threshold: 2}
lease: {watchdog: 1s}
engine_key: {consul: "%s", key: "%s"}
`, testenv.RedisAddr(t), testenv.ZooKeeperAddr(t), testenv.ConsulAddr(t), key)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUseWaitsForTheFleet: four processes follow one configuration with an
// engine key. With one of them SIGSTOPped, `use -wait` reports three
// followers, names the stopped one and exits 1; after SIGCONT it follows
// and a second use succeeds. A killed process leaves the fleet view.
func TestUseWaitsForTheFleet(t *testing.T) {
	path := fleetConfig(t)
	const workers = 4
	var cmds []*exec.Cmd
	for range workers {
		cmd := exec.Command(os.Args[0], configWorkerCommand, "-config", path, "-key", fmt.Sprintf("ops-fleet/%d", time.Now().UnixNano()), "-for", "90s")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = stdin.Close(); _ = cmd.Wait() })
		cmds = append(cmds, cmd)
	}
	status := func() string {
		t.Helper()
		_, out, _ := runCmd(t, "status", "-config", path)
		return out
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(status(), fmt.Sprintf("%d processes, all on primary", workers)); {
		if time.Now().After(deadline) {
			t.Fatalf("the four processes never all registered:\n%s", status())
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopped := cmds[3].Process
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "use", "-config", path, "-wait", "5s", "secondary")
	if code != 1 || !strings.Contains(errOut, "1 of 4 processes have not followed") ||
		!strings.Contains(errOut, fmt.Sprintf("/%d on primary", stopped.Pid)) || !strings.Contains(out, "3 of 4 processes on secondary") {
		t.Fatalf("use with a stopped process: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if s := status(); !strings.Contains(s, "processes disagree: 3 of 4 processes on secondary, 1 on primary") {
		t.Fatalf("status while one process is stopped:\n%s", s)
	}
	if err := stopped.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "use", "-config", path, "-wait", "10s", "secondary"); code != 0 || !strings.Contains(out, "4 of 4 processes on secondary") {
		t.Fatalf("use after SIGCONT: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// A killed process drops out of the view within its session TTL
	// (10s; Consul may take up to twice that).
	if err := cmds[0].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for !strings.Contains(status(), "3 processes, all on secondary") {
		if time.Since(killed) > 35*time.Second {
			t.Fatalf("the killed process is still listed after %v:\n%s", time.Since(killed), status())
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the killed process left the fleet view %v after the kill", time.Since(killed).Round(100*time.Millisecond))
}

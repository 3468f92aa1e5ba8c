package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/config"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// lockedBuffer collects a worker's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// threeEngineConfig writes the configuration: Redis primary, etcd
// backup, PostgreSQL pg, with an engine key of its own on consul.
func threeEngineConfig(t *testing.T, path, consul, key string) {
	t.Helper()
	body := fmt.Sprintf(`engines:
  - {name: primary, kind: redis, addrs: ["%s"], prefix: "ops-active:"}
  - {name: backup, kind: etcd, addrs: ["%s"]}
  - {name: pg, kind: postgres, dsn: "%s"}
health: {interval: 100ms, threshold: 2}
lease: {watchdog: 1s}
engine_key: {consul: "%s", key: "%s"}
`, testenv.RedisAddr(t), testenv.EtcdAddr(t), testenv.PostgresDSN(t), consul, key)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// markedEngines returns the engines the status table marks active ("*"
// in a row of the engine table).
func markedEngines(out string) []string {
	var marked []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && slices.Contains([]string{"primary", "backup", "pg"}, f[0]) &&
			slices.Contains(f, "*") {
			marked = append(marked, f[0])
		}
	}
	return marked
}

// startFollower starts a service process (the config worker) on the
// configuration at path, locking key, and waits until it has registered
// in the fleet; its log (stderr) collects into the returned buffer.
func startFollower(t *testing.T, path, key string) *lockedBuffer {
	t.Helper()
	var logs lockedBuffer
	cmd := exec.Command(os.Args[0], configWorkerCommand, "-config", path, "-key", key, "-for", "60s")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, out, _ := runCmd(t, "status", "-config", path)
		if strings.Contains(out, "1 processes, all on primary") {
			return &logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service never registered:\n%s\nits log:\n%s", out, logs.String())
		}
	}
}

// TestStatusFollowsTheEngineKey is issue #30 as a new user met it: a
// service process follows the engine key; `use pg` moves it; status must
// then mark pg (the key's engine), not primary (the first healthy one).
// Pinning backup in the file must change nothing and say so, in the
// service's log and in status. With the key's Consul unreachable, status
// marks no engine and says why.
func TestStatusFollowsTheEngineKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	key := fmt.Sprintf("cerberus-test/ctl-active/%d", time.Now().UnixNano())
	threeEngineConfig(t, path, testenv.ConsulAddr(t), key)
	logs := startFollower(t, path, key+"/lock")
	status := func(path string) (int, string) {
		t.Helper()
		code, out, errOut := runCmd(t, "status", "-config", path)
		return code, out + errOut
	}
	if code, out, errOut := runCmd(t, "use", "-config", path, "-wait", "10s", "pg"); code != 0 ||
		!strings.Contains(out, "1 of 1 processes on pg") {
		t.Fatalf("use pg: exit %d\n%s%s", code, out, errOut)
	}
	code, out := status(path)
	if m := markedEngines(out); code != 0 || !slices.Equal(m, []string{"pg"}) ||
		!strings.Contains(out, "active engine: pg (from engine key "+key+")") {
		t.Fatalf("status after use pg: exit %d, marked %q; want pg, from the engine key:\n%s", code, m, out)
	}

	// The operator edits the file instead: nothing moves, and both the
	// service's log and status say which command does.
	if err := config.SetEngine(path, "backup"); err != nil {
		t.Fatal(err)
	}
	want := "cerberusctl use -config " + path + " backup"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), want); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning naming %q in the service's log after the edit:\n%s", want, logs.String())
		}
	}
	if l := logs.String(); !strings.Contains(l, "engine key decides") || !strings.Contains(l, key) {
		t.Errorf("the reload warning does not name the engine key %s:\n%s", key, l)
	}
	code, out = status(path)
	if m := markedEngines(out); code != 0 || !slices.Equal(m, []string{"pg"}) ||
		!strings.Contains(out, `warning: engine: "backup" in the file moves no process while engine_key `+key) ||
		!strings.Contains(out, want) || !strings.Contains(out, "1 processes, all on pg") {
		t.Fatalf("status after the file edit: exit %d, marked %q; want pg, the warning and the fleet on pg:\n%s",
			code, m, out)
	}

	// The same configuration with the key on a closed loopback port.
	cut := filepath.Join(dir, "unreachable.yaml")
	threeEngineConfig(t, cut, fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), key)
	code, out = status(cut)
	if m := markedEngines(out); code != 1 || len(m) != 0 ||
		!strings.Contains(out, "active engine: unknown, no engine marked: engine key "+key+" cannot be read") {
		t.Fatalf("status with the key unreachable: exit %d, marked %q; want exit 1, none, and why:\n%s", code, m, out)
	}
}

// TestStatusRefusesBadInput: arguments status does not take are refused
// before the configuration is read.
func TestStatusRefusesBadInput(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, args := range [][]string{{"extra"}, {"-timeout", "0s"}, {"-timeout", "-1s"}} {
		code, _, errOut := runCmd(t, append([]string{"status", "-config", missing}, args...)...)
		if code != 2 || !strings.Contains(errOut, "usage: cerberusctl status") || strings.Contains(errOut, "missing.yaml") {
			t.Errorf("status %q: exit %d, stderr %q; want 2 and the usage, before reading the file", args, code, errOut)
		}
	}
}

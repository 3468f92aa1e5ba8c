package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/config"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// buildCtl builds the real cerberusctl binary into the test's directory.
func buildCtl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cerberusctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runBin runs the binary and returns its exit code, stdout and stderr.
func runBin(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut strings.Builder
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	} else if err != nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	return 0, out.String(), errOut.String()
}

// holdOn acquires key on the named engine with value, released when the
// test ends.
func holdOn(t *testing.T, n config.Named, key string, mode engine.Mode, value string) engine.Lease {
	t.Helper()
	l, err := n.Engine.Acquire(context.Background(), engine.Request{Key: key, Mode: mode, Value: value,
		Renew: true, TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire %s on %s: %v", key, n.Name, err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// TestLocksListsEveryEngine runs the real binary against a configuration
// with a key held on each of its two engines (Redis and ZooKeeper, the
// second not active): the table and the JSON show both, with their
// holders' mode, token and value; a released key disappears; bad
// arguments exit 2 before any I/O.
func TestLocksListsEveryEngine(t *testing.T) {
	path := twoEngineConfig(t)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	named, err := cfg.Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range named {
			_ = n.Engine.Close()
		}
	})
	p := fmt.Sprintf("ctl-locks/%d/", time.Now().UnixNano())
	la := holdOn(t, named[0], p+"a", engine.Exclusive, "pod-1")
	lb := holdOn(t, named[1], p+"b", engine.Shared, "pod-2")
	bin := buildCtl(t)

	code, out, errOut := runBin(t, bin, "locks", "-config", path, "-prefix", p)
	rowA := regexp.MustCompile(regexp.QuoteMeta(p+"a") + ` +exclusive +` + fmt.Sprint(la.Token()) + ` +pod-1 `)
	rowB := regexp.MustCompile(regexp.QuoteMeta(p+"b") + ` +shared +` + fmt.Sprint(lb.Token()) + ` +pod-2 `)
	if code != 0 || !strings.Contains(out, "engine primary (redis): 1 held keys") ||
		!strings.Contains(out, "engine secondary (zookeeper): 1 held keys") || !rowA.MatchString(out) || !rowB.MatchString(out) {
		t.Fatalf("locks: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	doc := locksJSON(t, bin, path, p)
	want := fmt.Sprintf("primary:%sa=exclusive/%d/pod-1 secondary:%sb=shared/%d/pod-2", p, la.Token(), p, lb.Token())
	if got := doc.summary(); got != want || doc.Engines[1].Keys[0].Holders[0].Granted == nil {
		t.Errorf("locks -json = %s (granted %v); want %s with ZooKeeper's grant time", got,
			doc.Engines[1].Keys[0].Holders[0].Granted, want)
	}
	if err := la.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := locksJSON(t, bin, path, p).summary(), fmt.Sprintf("primary: secondary:%sb=shared/%d/pod-2", p, lb.Token()); got != want {
		t.Errorf("locks -json after the release = %s; want %s", got, want)
	}
	for _, bad := range [][]string{{}, {"-prefix", "*"}, {"-all", "-prefix", "x"}, {"-prefix", "x", "-limit", "20000"}} {
		if code, _, errOut := runBin(t, bin, append([]string{"locks", "-config", path}, bad...)...); code != 2 ||
			!strings.Contains(errOut, "usage: cerberusctl locks") {
			t.Errorf("locks %v: exit %d, stderr %q; want 2 and the usage", bad, code, errOut)
		}
	}
}

// locksJSON runs locks -json for prefix p and decodes it.
func locksJSON(t *testing.T, bin, path, p string) locksDoc {
	t.Helper()
	code, out, errOut := runBin(t, bin, "locks", "-config", path, "-prefix", p, "-json")
	var doc locksDoc
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Engines) != 2 {
		t.Fatalf("locks -json: exit %d, %v\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	return doc
}

// summary renders a document as "engine:key=mode/token/value,... ...".
func (d locksDoc) summary() string {
	var parts []string
	for _, e := range d.Engines {
		var ks []string
		for _, k := range e.Keys {
			for _, h := range k.Holders {
				ks = append(ks, fmt.Sprintf("%s=%s/%d/%s", k.Key, h.Mode, h.Token, h.Value))
			}
		}
		parts = append(parts, e.Name+":"+strings.Join(ks, ","))
	}
	return strings.Join(parts, " ")
}

// TestLocksReportsAnEngineDown: with one engine unreachable, locks still
// lists the other, names the failure, and exits 1.
func TestLocksReportsAnEngineDown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cerberus.yaml")
	body := fmt.Sprintf(`engines:
  - {name: gone, kind: redis, addrs: ["127.0.0.1:1"]}
  - {name: zk, kind: zookeeper, addrs: ["%s"]}
`, testenv.ZooKeeperAddr(t))
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "locks", "-config", path, "-prefix", "ctl-locks-down/", "-timeout", "3s")
	if code != 1 || !strings.Contains(out, "engine gone (redis): error: ") || !strings.Contains(out, "engine zk (zookeeper): 0 held keys") {
		t.Fatalf("locks with an engine down: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

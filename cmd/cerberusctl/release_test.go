package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/config"
	"github.com/cerberus-go/cerberus/engine"
)

// TestRelease runs cerberusctl release against a configuration of Redis
// (active) and ZooKeeper: bad arguments exit 2 and a free key 1, before
// anything changes; without -yes it shows the holder and the command
// that frees it, and the holder keeps its key; with -yes it frees the key
// on the active engine, prints the holder's mode, token and value and
// who asked, and the holder is told ErrReleasedByOperator by its next
// renewal.
func TestRelease(t *testing.T) {
	path := twoEngineConfig(t)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	named, err := cfg.Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeNamed(named) })
	key := fmt.Sprintf("ctl-release/%d", time.Now().UnixNano())
	l := holdOn(t, named[0], key, engine.Exclusive, "pod-7")
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"-config", path, "-yes"}, 2, "name one key"},
		{[]string{"-config", path, "-yes", "a\nb"}, 2, "invalid key"},
		{[]string{"-config", path, "-engine", "nope", "-yes", key}, 2, `-engine "nope" is not an engine`},
		{[]string{"-config", path, "-yes", key + "-free"}, 1, "is not held on engine primary; nothing changed"},
		{[]string{"-config", path, "-engine", "secondary", key}, 1, "is not held on engine secondary; nothing to release"},
		{[]string{"-config", path, key}, 1, "would release"},
	} {
		code, out, errOut := runCmd(t, append([]string{"release"}, tc.args...)...)
		if code != tc.code || !strings.Contains(out+errOut, tc.says) {
			t.Errorf("release %q: exit %d, want %d saying %q\n%s%s", tc.args, code, tc.code, tc.says, out, errOut)
		}
	}
	if _, out, _ := runCmd(t, "release", "-config", path, key); !strings.Contains(out, fmt.Sprint(l.Token())) ||
		!strings.Contains(out, "-yes "+key) {
		t.Errorf("release without -yes does not show the holder's token %d and the command:\n%s", l.Token(), out)
	}
	if l.Err() != nil {
		t.Fatalf("a refused release ended the lease: %v", l.Err())
	}
	code, out, errOut := runCmd(t, "release", "-config", path, "-yes", key)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("exclusive  %d  pod-7", l.Token())) || !strings.Contains(out, "asked by ") ||
		!strings.Contains(errOut, "by=") {
		t.Fatalf("release -yes: exit %d\n%s%s", code, out, errOut)
	}
	select {
	case <-l.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the holder was not told within its 10s lease period")
	}
	if !errors.Is(l.Err(), engine.ErrReleasedByOperator) {
		t.Errorf("the holder ended with %v; want ErrReleasedByOperator", l.Err())
	}
}

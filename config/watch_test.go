package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// testWait bounds every wait in these tests: a hang guard, not a speed
// requirement.
const testWait = 30 * time.Second

type change struct {
	cfg *Config
	err error
}

// startWatch runs Watch on path until the test ends and returns the
// changes it reports.
func startWatch(t *testing.T, path string) <-chan change {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan change, 16)
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		done <- Watch(ctx, path, func(c *Config, err error) { changes <- change{c, err} })
	}()
	<-started
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch returned %v after cancel, want nil", err)
			}
		case <-time.After(testWait):
			t.Errorf("Watch did not return within %v of cancel", testWait)
		}
	})
	return changes
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// next waits for a change whose config satisfies ok, skipping others (a
// write may be seen as several bursts).
func next(t *testing.T, changes <-chan change, what string, ok func(change) bool) change {
	t.Helper()
	deadline := time.After(testWait)
	for {
		select {
		case c := <-changes:
			if ok(c) {
				return c
			}
		case <-deadline:
			t.Fatalf("no change %s within %v", what, testWait)
			return change{}
		}
	}
}

func engineIs(name string) func(change) bool {
	return func(c change) bool { return c.err == nil && c.cfg.Active == name }
}

// waitWatching writes path until Watch reports it: the watch is set up
// asynchronously, so the first write may come before it.
func waitWatching(t *testing.T, path string, changes <-chan change) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for time.Now().Before(deadline) {
		writeFile(t, path, mem+"engine: ready\n")
		select {
		case c := <-changes:
			if engineIs("ready")(c) {
				return
			}
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Fatalf("Watch reported nothing within %v", testWait)
}

func TestWatch(t *testing.T) {
	// Registered first, so it runs after startWatch's cleanup.
	t.Cleanup(func() { goleak.VerifyNone(t) })
	dir := t.TempDir()
	path := filepath.Join(dir, "cerberus.yaml")
	writeFile(t, path, mem)
	changes := startWatch(t, path)
	waitWatching(t, path, changes)

	// An edit in place.
	writeFile(t, path, mem+"engine: edited\n")
	next(t, changes, "after an edit", engineIs("edited"))

	// An editor's save: write a temporary file, rename it over the config.
	tmp := filepath.Join(dir, ".cerberus.yaml.swp")
	writeFile(t, tmp, mem+"engine: renamed\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	next(t, changes, "after a rename-replace", engineIs("renamed"))

	// Still watched after the rename.
	writeFile(t, path, mem+"engine: again\n")
	next(t, changes, "after an edit following the rename", engineIs("again"))

	// An invalid file is reported as an error.
	writeFile(t, path, mem+"health: {interval: -1s}\n")
	c := next(t, changes, "reporting an invalid file", func(c change) bool { return c.err != nil })
	if !errors.Is(c.err, ErrInvalid) || c.cfg != nil {
		t.Errorf("invalid file reported as (%v, %v)", c.cfg, c.err)
	}

	// Other files in the directory are ignored.
	writeFile(t, filepath.Join(dir, "other.yaml"), "garbage: [")
	writeFile(t, path, mem+"engine: last\n")
	next(t, changes, "after the last edit", func(c change) bool {
		if c.err != nil {
			t.Errorf("unexpected error: %v", c.err)
		}
		return engineIs("last")(c)
	})
}

func TestWatchStopsAndRefuses(t *testing.T) {
	// Registered first, so it runs after startWatch's cleanup.
	t.Cleanup(func() { goleak.VerifyNone(t) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	writeFile(t, path, mem)
	if err := Watch(ctx, path, func(*Config, error) { t.Error("onChange called") }); err != nil {
		t.Errorf("Watch on a cancelled context = %v, want nil", err)
	}
	if err := Watch(context.Background(), filepath.Join(dir, "missing", "c.yaml"), nil); err == nil {
		t.Error("Watch in a missing directory succeeded")
	}
	if err := Watch(context.Background(), filepath.Join(dir, "c.ini"), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Watch(.ini) = %v, want ErrInvalid", err)
	}
}

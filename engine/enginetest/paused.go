package enginetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// holdEnv names the key a holder process of RunPausedRelease holds; it is
// set only in that process's environment.
const holdEnv = "CERBERUS_ENGINETEST_HOLD"

// pausedTTL is the lease period of RunPausedRelease's holder, unless the
// engine's MinTTL is longer: long enough that the pause (a force release
// and a grant) ends well within it on a loaded machine.
const pausedTTL = 8 * time.Second

// Hold is the holder process of RunPausedRelease, for the package's
// TestMain: when the test binary was started as one, it takes the key
// named by its environment with an engine from newEngine (exclusive,
// renewed), prints "held <token>", and when the lease ends prints "lost
// <Err>", then "release <Release's error>", and it reports ok, with the
// exit code; otherwise it does nothing and reports false.
//
//	func TestMain(m *testing.M) {
//		if code, ok := enginetest.Hold(holderEngine); ok {
//			os.Exit(code)
//		}
//		...
//	}
func Hold(newEngine Factory) (code int, ok bool) {
	key := os.Getenv(holdEnv)
	if key == "" {
		return 0, false
	}
	e, err := newEngine()
	if err != nil {
		fmt.Println("error", err)
		return 2, true
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ttl := max(pausedTTL, e.Limits().MinTTL)
	l, err := e.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: ttl, Renew: true, Value: "paused"})
	if err != nil {
		fmt.Println("error", err)
		return 2, true
	}
	fmt.Println("held", l.Token())
	select {
	case <-l.Done():
		fmt.Println("lost", l.Err())
	case <-ctx.Done():
		fmt.Println("still held")
	}
	fmt.Println("release", l.Release(ctx))
	return 0, true
}

// RunPausedRelease checks a force release of a key whose holder is a
// process stopped with SIGSTOP: it starts the test binary as a holder
// process (see Hold; env is added to its environment, for its Factory),
// stops it once it holds the key, and while an Acquire of this process
// waits for the key, force-releases it with an engine from newEngine.
// The waiter must be granted, with a higher token, within 10s, though the
// holder is stopped. Then the holder is resumed: its Done must close with
// engine.ErrReleasedByOperator within its TTL and 2s, its Release must be
// engine.ErrNotHeld, and the waiter must still hold the key.
func RunPausedRelease(t *testing.T, newEngine Factory, env ...string) {
	t.Helper()
	key := "paused-" + runID()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), holdEnv+"="+key), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		for s := bufio.NewScanner(out); s.Scan(); {
			lines <- s.Text()
		}
	}()
	var token uint64
	if _, err := fmt.Sscanf(nextLine(t, lines, "held ", time.Minute), "held %d", &token); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	e, err := newEngine()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ttl := max(pausedTTL, e.Limits().MinTTL)
	next := pausedHandOver(t, e, key, token)
	if next == nil {
		return
	}
	defer next.Release(context.Background())
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if lost := nextLine(t, lines, "lost ", ttl+2*time.Second); !strings.Contains(lost, engine.ErrReleasedByOperator.Error()) {
		t.Errorf("the resumed holder said %q; want engine.ErrReleasedByOperator", lost)
	}
	if rel := nextLine(t, lines, "release ", 10*time.Second); !strings.Contains(rel, engine.ErrNotHeld.Error()) {
		t.Errorf("the resumed holder's Release said %q; want engine.ErrNotHeld", rel)
	}
	select {
	case <-next.Done():
		t.Errorf("the next holder lost %s when the resumed holder released it: %v", key, next.Err())
	default:
	}
}

// pausedHandOver force-releases key, held with token by a stopped
// process, while an Acquire by e waits for it, and returns the waiter's
// lease, or nil after a failure.
func pausedHandOver(t *testing.T, e engine.Engine, key string, token uint64) engine.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan engine.Lease, 1)
	go func() {
		l, err := e.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: time.Minute, Renew: true, Wait: true})
		if err != nil {
			t.Errorf("waiting acquire of %s: %v", key, err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // let the waiter queue
	rel := engine.ReleaserOf(e)
	if rel == nil {
		t.Fatalf("%s has no engine.Releaser", e.Name())
	}
	hs, err := rel.ForceRelease(ctx, key)
	if err != nil || len(hs) != 1 || hs[0].Token != token {
		t.Errorf("ForceRelease(%s) of a stopped holder = %v, %v; want its token %d", key, hs, err, token)
	}
	select {
	case l := <-got:
		if l != nil && l.Token() <= token {
			t.Errorf("the next holder's token %d is not above the stopped one's %d", l.Token(), token)
		}
		return l
	case <-time.After(10 * time.Second):
		cancel()
		if l := <-got; l != nil {
			_ = l.Release(context.Background())
		}
		t.Errorf("the waiter was not granted %s within 10s of the force release of a stopped holder", key)
		return nil
	}
}

// nextLine returns the next line of the holder process, which must begin
// with prefix and come within d.
func nextLine(t *testing.T, lines <-chan string, prefix string, d time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok || !strings.HasPrefix(l, prefix) {
			t.Fatalf("holder process: %q, want a %q line", l, prefix)
		}
		return l
	case <-time.After(d):
		t.Fatalf("no %q line from the holder process within %v", prefix, d)
	}
	return ""
}

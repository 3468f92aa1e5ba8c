package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/failover"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// releaseTTL is the holders' watchdog period: long enough that a grant
// within releaseGrant of the force release cannot be the key's expiry
// (the stopped holder renewed it at most a third of it before).
const (
	releaseTTL   = 6 * time.Second
	releaseGrant = 2 * time.Second
)

// holderLog follows the output of a holder process (runHolder).
type holderLog struct {
	t    *testing.T
	path string
}

// line returns the holder's first line beginning with prefix, waiting up
// to within for it.
func (h holderLog) line(prefix string, within time.Duration) string {
	h.t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(h.path)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no %q line from the holder within %v in %s:\n%s", prefix, within, h.path, b)
		}
	}
}

// spawnHolder starts a holder process on Redis taking key with a
// watchdog of releaseTTL, and waits until it holds; it returns the process,
// its log and its token.
func spawnHolder(t *testing.T, key, fenceAddr string) (*exec.Cmd, holderLog, uint64) {
	t.Helper()
	dir := t.TempDir()
	spec := workerSpec{Engine: "redis", Addrs: []string{testenv.RedisAddr(t)}, Prefix: key, TTL: releaseTTL,
		Call: 10 * time.Second, Duration: 2 * time.Minute, Fence: fenceAddr, HoldOne: true}
	cmd := spawnWorker(t, dir, spec)
	log := holderLog{t: t, path: filepath.Join(dir, "worker-0.log")}
	var tok uint64
	if _, err := fmt.Sscanf(log.line("held ", 20*time.Second), "held %d", &tok); err != nil {
		t.Fatal(err)
	}
	return cmd, log, tok
}

// waitFor starts a Lock of key on c in the background, as the next
// waiter, and returns where its lease arrives.
func waitFor(t *testing.T, c *cerberus.Client, key string) <-chan *cerberus.Lease {
	t.Helper()
	got := make(chan *cerberus.Lease, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l, err := c.Lock(ctx, key, cerberus.WithWatchdog(releaseTTL))
		if err != nil {
			t.Errorf("the waiter's Lock of %s: %v", key, err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // let it queue
	return got
}

// grantedBy receives the waiter's lease, which must arrive within
// releaseGrant of the release at released, with a token above old and a
// fenced write the resource accepts.
func grantedBy(t *testing.T, got <-chan *cerberus.Lease, released time.Time, old uint64, f *fence, key string) *cerberus.Lease {
	t.Helper()
	var l *cerberus.Lease
	select {
	case l = <-got:
	case <-time.After(releaseTTL + 10*time.Second):
		t.Fatalf("the waiter was not granted %s", key)
	}
	if l == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	if d := time.Since(released); d > releaseGrant {
		t.Errorf("the waiter was granted %v after the release; want within %v (the holder's key would expire later)", d, releaseGrant)
	}
	if l.Token() <= old {
		t.Errorf("the waiter's token %d is not above the released holder's %d", l.Token(), old)
	}
	if !f.take(key, l.Token(), "waiter") {
		t.Errorf("the waiter's fenced write (token %d) was refused", l.Token())
	}
	return l
}

// toldAndRefused checks the holder's last lines: it was told
// ErrReleasedByOperator within bound of since, and its fenced write was
// refused.
func toldAndRefused(t *testing.T, log holderLog, since time.Time, bound time.Duration) {
	t.Helper()
	lost := log.line("lost ", bound+10*time.Second)
	var at int64
	if _, err := fmt.Sscan(strings.Fields(lost)[1], &at); err != nil {
		t.Fatalf("bad line %q", lost)
	}
	told := time.Unix(0, at).Sub(since)
	fmt.Printf("RELEASE: holder told %v after it could renew (bound %v)\n", told.Round(time.Millisecond), bound)
	if told > bound {
		t.Errorf("the holder was told %v after it could renew; want within %v", told, bound)
	}
	if !strings.Contains(lost, engine.ErrReleasedByOperator.Error()) {
		t.Errorf("the holder ended with %q; want %q", lost, engine.ErrReleasedByOperator)
	}
	if w := log.line("write ", 10*time.Second); w != "write stale" {
		t.Errorf("the released holder's fenced write: %q; want it refused (stale)", w)
	}
}

// buildCtl builds cerberusctl and writes a configuration naming the
// shared Redis, returning both paths.
func buildCtl(t *testing.T) (bin, cfg string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "cerberusctl")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/cerberus-go/cerberus/cmd/cerberusctl").CombinedOutput(); err != nil {
		t.Fatalf("go build cerberusctl: %v\n%s", err, out)
	}
	cfg = filepath.Join(dir, "cerberus.yaml")
	body := fmt.Sprintf("engines:\n  - {name: primary, kind: redis, addrs: [%q]}\n", testenv.RedisAddr(t))
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return bin, cfg
}

// ctl runs cerberusctl and returns its exit code and output.
func ctl(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestForceReleaseStoppedHolder: a holder process with a watchdog is
// SIGSTOPped; cerberusctl release refuses bad input (no -yes, a free key,
// a bad key) and changes nothing, then frees the key: the waiting process
// is granted it at once with a higher token. The holder, resumed after its
// lease period would have run out, is told ErrReleasedByOperator at its
// first renewal, and its fenced write is refused.
func TestForceReleaseStoppedHolder(t *testing.T) {
	bin, cfg := buildCtl(t)
	f := startFence(t)
	key := unique(t, "release-stopped")
	holder, log, tok := spawnHolder(t, key, f.addr)
	c := specClient(t, workerSpec{Engine: "redis", Addrs: []string{testenv.RedisAddr(t)}})
	got := waitFor(t, c, key)
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { _ = holder.Process.Signal(syscall.SIGCONT) })
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"release", "-config", cfg, key}, 1, "nothing was changed; to release it, run:"},
		{[]string{"release", "-config", cfg, "-yes", key + "-free"}, 1, "is not held on engine primary; nothing changed"},
		{[]string{"release", "-config", cfg, "-yes", "bad\x01key"}, 2, "invalid key"},
	} {
		code, out := ctl(t, bin, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.says) {
			t.Errorf("cerberusctl %q: exit %d, want %d saying %q:\n%s", tc.args, code, tc.code, tc.says, out)
		}
	}
	select {
	case <-got:
		t.Fatal("the waiter was granted before the release: a refused release changed something")
	default:
	}
	code, out := ctl(t, bin, "release", "-config", cfg, "-yes", key)
	released := time.Now()
	if code != 0 || !strings.Contains(out, fmt.Sprintf("exclusive  %d", tok)) || !strings.Contains(out, "asked by ") {
		t.Fatalf("cerberusctl release -yes %s: exit %d:\n%s", key, code, out)
	}
	fmt.Printf("RELEASE transcript:\n%s", out)
	grantedBy(t, got, released, tok, f, key)
	time.Sleep(time.Until(stopped.Add(releaseTTL + time.Second))) // past the holder's lease period
	resumed := time.Now()
	if err := holder.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	toldAndRefused(t, log, resumed, 2*time.Second)
}

// TestForceReleaseLiveHolder: a live, renewing holder process is freed
// through the failover Handler's POST (served here over the same Redis):
// a GET carrying the release changes nothing, the POST lists the holder,
// the waiter is granted at once with a higher token, and the holder is
// told ErrReleasedByOperator by its next renewal (a third of its lease
// period), after which its fenced write is refused.
func TestForceReleaseLiveHolder(t *testing.T) {
	f := startFence(t)
	key := unique(t, "release-live")
	_, log, tok := spawnHolder(t, key, f.addr)
	e, err := dialEngine(workerSpec{Engine: "redis", Addrs: []string{testenv.RedisAddr(t)}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := failover.New([]failover.NamedEngine{{Name: "primary", Engine: e}},
		failover.Options{Caller: func(r *http.Request) string { return "test@" + r.RemoteAddr }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); _ = m.Close() })
	srv := httptest.NewServer(m.Handler(true))
	t.Cleanup(srv.Close)
	got := waitFor(t, c, key)
	resp, err := http.Get(srv.URL + "?" + url.Values{"release": {key}, "confirm": {key}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET with release: %d; want 405", resp.StatusCode)
	}
	if hs, err := m.Holders(context.Background(), key); err != nil || len(hs) != 1 || hs[0].Token != tok {
		t.Fatalf("after the GET: holders %v, %v; want the holder still there", hs, err)
	}
	resp, err = http.PostForm(srv.URL, url.Values{"release": {key}, "confirm": {key}})
	if err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var doc struct {
		Holders []struct{ Token uint64 }
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &doc) != nil || len(doc.Holders) != 1 || doc.Holders[0].Token != tok {
		t.Fatalf("POST release: %d %s; want the holder with token %d", resp.StatusCode, body, tok)
	}
	grantedBy(t, got, released, tok, f, key)
	toldAndRefused(t, log, released, releaseTTL/3+time.Second)
}

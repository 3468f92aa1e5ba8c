package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/cerberus-go/cerberus/failover"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// chromiumPath finds the browser the page test drives: CERBERUS_CHROMIUM,
// else chromium on PATH. It fails t with the command that installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser"}
	if p := os.Getenv("CERBERUS_CHROMIUM"); p != "" {
		names = []string{p}
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found (CERBERUS_CHROMIUM or chromium on PATH): run scripts/services.sh up, which installs Debian's chromium")
	return ""
}

// newBrowser starts a headless chromium with the flags this machine's
// closed network needs and a fresh profile, and returns a tab's context.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled,
		emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return ctx
}

// pageFleetConfig writes the fleet's configuration: Redis then etcd, the
// engine key on Consul.
func pageFleetConfig(t *testing.T, path, key string) {
	t.Helper()
	body := fmt.Sprintf(`engines:
  - {name: primary, kind: redis, addrs: [%q]}
  - {name: backup, kind: etcd, addrs: [%q]}
health: {interval: 200ms, threshold: 3}
engine_key: {consul: %q, key: %q}
`, testenv.RedisAddr(t), testenv.EtcdAddr(t), testenv.ConsulAddr(t), key)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startPageWorker starts a page worker and returns its handler's URL and
// the tokens of the keys it holds, once it holds them all.
func startPageWorker(t *testing.T, dir string, i int, spec pageWorkerSpec) (string, map[string]uint64) {
	t.Helper()
	spec.HTTP = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	spec.Life = 5 * time.Minute
	raw, _ := json.Marshal(spec)
	logPath := filepath.Join(dir, fmt.Sprintf("page-worker-%d.log", i))
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pageWorkerEnv+"="+string(raw))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = log.Close() })
	exited := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(exited) }()
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); {
		if held, ok := readPageHeld(t, logPath); ok {
			return "http://" + spec.HTTP + "/", held
		}
		select {
		case <-exited:
			t.Fatalf("page worker %d exited; see %s", i, logPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("page worker %d did not hold its keys within 90s; see %s", i, logPath)
	return "", nil
}

// readPageHeld reads a page worker's log: the keys it holds, and whether
// it said ready.
func readPageHeld(t *testing.T, path string) (map[string]uint64, bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	held := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var h pageHeld
		if json.Unmarshal(sc.Bytes(), &h) == nil && h.Key != "" {
			held[h.Key] = h.Token
		}
		if sc.Text() == "ready" {
			return held, true
		}
	}
	return nil, false
}

// pageJSON is the part of the Handler's JSON the page test compares.
type pageJSON struct {
	Active     string                `json:"active"`
	ActiveFrom string                `json:"active_from"`
	Epoch      uint64                `json:"epoch"`
	Fleet      *failover.FleetStatus `json:"fleet"`
	Locks      *struct {
		Engines []failover.EngineLocks `json:"engines"`
	} `json:"locks"`
}

// getPageJSON GETs u as an API client would.
func getPageJSON(t *testing.T, u string) pageJSON {
	t.Helper()
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc pageJSON
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&doc) != nil {
		t.Fatalf("GET %s: %d, or not JSON", u, resp.StatusCode)
	}
	return doc
}

// awaitFleet polls u's JSON until n processes are registered on one
// engine at one epoch.
func awaitFleet(t *testing.T, u string, n int) {
	t.Helper()
	var doc pageJSON
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		doc = getPageJSON(t, u)
		if doc.Fleet != nil && len(doc.Fleet.Members) == n && len(doc.Fleet.ByEngine()) == 1 && doc.Active != "" {
			return
		}
	}
	t.Fatalf("the fleet did not show %d agreeing processes within 60s: %+v", n, doc.Fleet)
}

// TestStatusPageInBrowser: two processes of a fleet (Redis then etcd, the
// engine key on Consul) hold keys, one of them a key that looks like
// markup; headless chromium, with JavaScript off, loads each one's status
// page. The page shows what the Handler's JSON says (active engine and
// why, epoch, both processes agreeing, the held keys and their tokens on
// each engine, the tokens the holders got); the forms appear only where
// operators may act; the listing form works without script; a bad
// prefix says why. A screenshot is saved (and copied to
// $CERBERUS_PAGE_SCREENSHOT when set, as docs/status-page.png was).
func TestStatusPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("needs chromium and the servers")
	}
	ctx := newBrowser(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cerberus.yaml")
	pageFleetConfig(t, cfg, unique(t, "cerberus-test/page"))
	prefix := unique(t, "page") + "/"
	specs := []pageWorkerSpec{
		{Config: cfg, Allow: true, Keys: []string{prefix + "orders/17", prefix + `<b>"report"&amp;</b>`}},
		{Config: cfg, Keys: []string{prefix + "orders/42"}},
	}
	var urls []string
	held := map[string]uint64{}
	for i, s := range specs {
		u, h := startPageWorker(t, dir, i, s)
		urls = append(urls, u)
		for k, tok := range h {
			held[k] = tok
		}
	}
	awaitFleet(t, urls[0], len(specs))
	query := "?prefix=" + url.QueryEscape(prefix)
	for i, u := range urls {
		doc := getPageJSON(t, u+query)
		if _, err := chromedp.Run(ctx, chromedp.NavigateResponse(u+query)); err != nil {
			t.Fatal(err)
		}
		v := readPage(t, ctx)
		checkPageAgainstJSON(t, i, v, doc, held)
		checkPageForms(t, i, v, specs[i].Allow, held)
	}
	checkListingForm(t, ctx, urls[1], prefix, held)
	if _, err := chromedp.Run(ctx, chromedp.NavigateResponse(urls[0]+"?prefix=&limit=0")); err != nil {
		t.Fatal(err)
	}
	if v := readPage(t, ctx); !strings.Contains(v.ListErr, "give a prefix") || len(v.Held) != 0 {
		t.Errorf("page for ?prefix=: error %q, %d keys; want it to ask for a prefix and list nothing", v.ListErr, len(v.Held))
	}
	savePageScreenshot(t, ctx, urls[0]+query)
}

// checkPageAgainstJSON compares page i with its handler's JSON and with
// the tokens the holders were granted.
func checkPageAgainstJSON(t *testing.T, i int, v pageView, doc pageJSON, held map[string]uint64) {
	t.Helper()
	if v.Active != doc.Active || v.ActiveFrom != doc.ActiveFrom || v.Epoch != fmt.Sprint(doc.Epoch) {
		t.Errorf("page %d shows %q (%q) at epoch %s; the JSON says %q (%q) at %d", i, v.Active, v.ActiveFrom,
			v.Epoch, doc.Active, doc.ActiveFrom, doc.Epoch)
	}
	if doc.Fleet == nil || doc.Locks == nil {
		t.Fatalf("page %d: the JSON has no fleet or no locks: %+v", i, doc)
	}
	var ids []string
	for _, m := range doc.Fleet.Members {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	slices.Sort(v.Processes)
	if len(ids) != 2 || !slices.Equal(v.Processes, ids) {
		t.Errorf("page %d lists processes %q; the JSON %q", i, v.Processes, ids)
	}
	if want := fmt.Sprintf("agree: all 2 processes on %s at epoch %d", doc.Active, doc.Epoch); v.Agreement != want {
		t.Errorf("page %d says %q; want %q", i, v.Agreement, want)
	}
	fromJSON := map[string]string{}
	for _, e := range doc.Locks.Engines {
		for _, k := range e.Keys {
			var toks []string
			for _, h := range k.Holders {
				toks = append(toks, fmt.Sprint(h.Token))
			}
			fromJSON[e.Name+" "+k.Key] = strings.Join(toks, ",")
		}
	}
	if fmt.Sprint(v.Held) != fmt.Sprint(fromJSON) {
		t.Errorf("page %d lists %v; the JSON %v", i, v.Held, fromJSON)
	}
	for k, tok := range held {
		if got, want := v.Held[doc.Active+" "+k], fmt.Sprint(tok&(1<<48-1)); got != want {
			t.Errorf("page %d: %q on %s has token %q; its holder got %d (engine token %s)", i, k, doc.Active, got, tok, want)
		}
	}
	if len(v.Held) != len(held) || v.Scripts != 0 || v.Bold != 0 {
		t.Errorf("page %d: %d keys listed (want %d), %d scripts, %d <b> elements (a key was not escaped)",
			i, len(v.Held), len(held), v.Scripts, v.Bold)
	}
}

// checkPageForms: with permission, a switch form and one force-release
// form a listed key; without, no form that posts.
func checkPageForms(t *testing.T, i int, v pageView, allow bool, held map[string]uint64) {
	t.Helper()
	if !allow {
		if v.PostForms != 0 || v.SwitchForm || len(v.Release) != 0 {
			t.Errorf("page %d without permission has %d POST forms", i, v.PostForms)
		}
		return
	}
	keys := slices.Sorted(maps.Keys(held))
	slices.Sort(v.Release)
	if !v.SwitchForm || !slices.Equal(v.Release, keys) || v.PostForms != len(keys)+1 {
		t.Errorf("page %d with permission: switch form %t, release forms for %q (%d POST forms); want one for each of %q",
			i, v.SwitchForm, v.Release, v.PostForms, keys)
	}
}

// checkListingForm types the prefix into the page's listing form and
// submits it with Enter, as an operator would with JavaScript off: the
// browser's own GET brings the keys.
func checkListingForm(t *testing.T, ctx context.Context, u, prefix string, held map[string]uint64) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.NavigateResponse(u)); err != nil {
		t.Fatal(err)
	}
	if v := readPage(t, ctx); len(v.Held) != 0 {
		t.Fatalf("the page without ?prefix lists %v", v.Held)
	}
	// Enter in the field submits the form: the browser's own implicit
	// submission, no script and no mouse position.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.WaitVisible(chromedp.CSS(`#list-form input[name="prefix"]`))); err != nil {
		t.Fatalf("the listing form's field: %v", err)
	}
	resp, err := chromedp.RunResponse(sctx, chromedp.SendKeys(chromedp.CSS(`#list-form input[name="prefix"]`), prefix+"\r"))
	if err != nil {
		t.Fatalf("submitting the listing form: %v", err)
	}
	v := readPage(t, ctx)
	if resp.Status != http.StatusOK || !strings.Contains(resp.URL, "prefix="+url.QueryEscape(prefix)) || len(v.Held) != len(held) {
		t.Errorf("the listing form went to %s (%d) and lists %v; want the %d held keys", resp.URL, resp.Status, v.Held, len(held))
	}
}

// savePageScreenshot saves a full-page PNG of u under the test's temp
// dir, and a copy to $CERBERUS_PAGE_SCREENSHOT when set.
func savePageScreenshot(t *testing.T, ctx context.Context, u string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.NavigateResponse(u)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(png), "\x89PNG") {
		t.Fatalf("the screenshot is not a PNG (%d bytes)", len(png))
	}
	paths := []string{filepath.Join(t.TempDir(), "status-page.png")}
	if p := os.Getenv("CERBERUS_PAGE_SCREENSHOT"); p != "" {
		paths = append(paths, p)
	}
	for _, p := range paths {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}
}

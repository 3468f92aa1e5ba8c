package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cerberus-go/cerberus/internal/checker"
)

// fence is the fenced resource every worker writes to: per key it keeps
// the largest token seen and the holder that showed it, and refuses an
// operation with a smaller token, or with the same token from another
// holder.
type fence struct {
	mu       sync.Mutex
	max      map[string]uint64
	by       map[string]string // holder of max[key]
	accepted int
	rejected int
	addr     string
}

func startFence(t *testing.T) *fence {
	t.Helper()
	f := newFence()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return f
}

func newFence() *fence { return &fence{max: map[string]uint64{}, by: map[string]string{}} }

// serve takes "key token holder" on /begin and /write alike, and answers
// "ok UNIXNANO" (when it accepted) or "stale".
func (f *fence) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
	parts := strings.Fields(string(b))
	if len(parts) != 3 {
		http.Error(w, "bad operation", http.StatusBadRequest)
		return
	}
	token, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		http.Error(w, "bad token", http.StatusBadRequest)
		return
	}
	if at, ok := f.takeAt(parts[0], token, parts[2]); ok {
		_, _ = io.WriteString(w, "ok "+strconv.FormatInt(at, 10))
	} else {
		_, _ = io.WriteString(w, "stale")
	}
}

// take reports whether an operation on key with token by holder is
// accepted: only if token is larger than every token the key has seen, or
// is the largest and was shown by the same holder.
func (f *fence) take(key string, token uint64, holder string) bool {
	_, ok := f.takeAt(key, token, holder)
	return ok
}

// takeAt is take, also returning when (unix ns) it accepted.
func (f *fence) takeAt(key string, token uint64, holder string) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.max[key]; token < m || token == m && f.by[key] != holder {
		f.rejected++
		return 0, false
	}
	f.max[key], f.by[key] = token, holder
	f.accepted++
	return time.Now().UnixNano(), true
}

// faultProxy is an embedded toxiproxy between the workers and one server.
type faultProxy struct {
	p *toxiproxy.Proxy
}

// startProxy puts a toxiproxy in front of upstream and returns it; Addr is
// what clients dial.
func startProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "cerberus", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy: %v", err)
	}
	t.Cleanup(p.Stop)
	return &faultProxy{p: p}
}

// Addr is the proxy's listening address.
func (f *faultProxy) Addr() string { return f.p.Listen }

// toxic adds a toxic on both directions; the returned func removes it.
func (f *faultProxy) toxic(t *testing.T, kind string, attrs map[string]any) func() {
	t.Helper()
	var names []string
	for _, stream := range []string{"upstream", "downstream"} {
		name := kind + "_" + stream
		b, _ := json.Marshal(map[string]any{"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attrs})
		if _, err := f.p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
			t.Fatalf("toxiproxy: add %s: %v", name, err)
		}
		names = append(names, name)
	}
	return func() {
		for _, n := range names {
			_ = f.p.Toxics.RemoveToxic(t.Context(), n)
		}
	}
}

// pausable is a server process the checker can stop and restart.
type pausable interface {
	Pause()
	Resume()
	Restart()
}

// fault is one injected fault: do starts it, and its duration later undo
// ends it (undo may be nil). crash marks a fault that kills the server;
// killed, if set, is when do had the server dead (checker.Check's crash
// time), else the time do started is taken.
type fault struct {
	name   string
	do     func()
	dur    time.Duration
	undo   func()
	crash  bool
	killed *time.Time
}

// chaosTarget is one engine under test.
type chaosTarget struct {
	name   string   // run name in the summary line
	engine string   // workerSpec.Engine
	addrs  []string // what workers dial
	table  string   // mysql table
	ttl    time.Duration
	// faults are injected one after another, each followed by a quiet
	// spell; clientPause (if > 0) ends the run with a SIGSTOP of worker 0.
	faults      []fault
	clientPause time.Duration
	// volatile marks an engine whose locks live in the server's
	// connections (MySQL's row strategy): they die with the server at
	// once, before any holder can be told, so the checker is given the
	// crash times (see checker.Check).
	volatile bool
	// primitives adds semaphore and election workloads (workerSpec.
	// Primitives), for engines that count and list holders.
	primitives bool
}

// chaosParams size a run.
type chaosParams struct {
	procs, goroutines, keys int
	quiet                   time.Duration // before the first fault and between faults
}

func defaultChaos() chaosParams {
	return chaosParams{procs: 3, goroutines: 6, keys: 4, quiet: 1500 * time.Millisecond}
}

// soakEnv names the environment variable that makes every checker test a
// soak: with CERBERUS_SOAK=10m (make soak) the checker tests share ten
// minutes, each repeating its run until its share is spent.
const soakEnv = "CERBERUS_SOAK"

// checkerTests is how many tests call checkEngine: each gets this share of
// a soak.
const checkerTests = 9

// checkEngine runs the checker on tg once, or, in a soak, again and again
// for its share of the soak, and prints a total line after several rounds.
func checkEngine(t *testing.T, tg chaosTarget) checker.Result {
	t.Helper()
	var budget time.Duration
	if v := os.Getenv(soakEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 10m", soakEnv, v)
		}
		budget = d / checkerTests
	}
	start := time.Now()
	var total checker.Result
	rounds := 0
	for {
		total.Add(runChaos(t, tg, defaultChaos()))
		rounds++
		if time.Since(start) >= budget || t.Failed() {
			break
		}
	}
	if rounds > 1 {
		line := total.Line(fmt.Sprintf("%s-total-%d-rounds", tg.name, rounds))
		t.Log(line)
		fmt.Println(line)
	}
	return total
}

// runChaos starts the workers, injects the target's faults, collects the
// records and judges them. It logs the summary line and fails the test on a
// violation or a hung call.
func runChaos(t *testing.T, tg chaosTarget, p chaosParams) checker.Result {
	t.Helper()
	f := startFence(t)
	dir := t.TempDir()
	// The run lasts as long as its faults plus the quiet spells around them.
	d := p.quiet
	for _, ft := range tg.faults {
		d += ft.dur + p.quiet
	}
	if tg.clientPause > 0 {
		d += tg.clientPause + p.quiet
	}
	prefix := unique(t, "chaos/"+tg.name)
	var cmds []*exec.Cmd
	var outs []string
	for i := range p.procs {
		spec := workerSpec{
			Proc: i, Engine: tg.engine, Addrs: tg.addrs, Table: tg.table, Prefix: prefix,
			Keys: p.keys, Goroutines: p.goroutines, Duration: d, TTL: tg.ttl,
			Hold: 20 * time.Millisecond, Call: 2 * time.Second, Fence: f.addr,
			Out: filepath.Join(dir, fmt.Sprintf("worker-%d.jsonl", i)), MaxOps: 100000,
			Primitives: tg.primitives,
		}
		cmds, outs = append(cmds, spawnWorker(t, dir, spec)), append(outs, spec.Out)
	}
	var pauses []checker.Pause
	var crashes []int64
	faults := 0
	time.Sleep(p.quiet)
	for _, ft := range tg.faults {
		t.Logf("%s: %s fault %s for %s", tg.name, time.Now().Format("15:04:05.000"), ft.name, ft.dur)
		before := time.Now()
		ft.do()
		if ft.crash && tg.volatile {
			at := before
			if ft.killed != nil {
				at = *ft.killed
			}
			crashes = append(crashes, at.UnixNano())
		}
		faults++
		time.Sleep(ft.dur)
		if ft.undo != nil {
			ft.undo()
		}
		time.Sleep(p.quiet)
	}
	if tg.clientPause > 0 {
		t.Logf("%s: %s fault SIGSTOP of worker 0 for %s", tg.name, time.Now().Format("15:04:05.000"), tg.clientPause)
		start := time.Now()
		if err := cmds[0].Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(tg.clientPause)
		if err := cmds[0].Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		pauses = append(pauses, checker.Pause{Proc: 0, Start: start.UnixNano(), End: time.Now().UnixNano()})
		faults++
	}
	awaitWorkers(t, dir, cmds, d+60*time.Second)
	secs, calls, end := collect(t, outs)
	r := checker.Check(secs, calls, pauses, crashes, end)
	r.Faults = faults
	t.Log(r.Line(tg.name))
	fmt.Println(r.Line(tg.name)) // the run's summary line, also without -v
	t.Logf("fenced resource: %d writes accepted, %d rejected", f.accepted, f.rejected)
	for _, ex := range r.Examples {
		t.Log(ex)
	}
	logErrors(t, calls)
	logRefused(t, tg.name, calls)
	if r.Sections == 0 {
		t.Errorf("%s: no critical section completed: the run tested nothing", tg.name)
	}
	if tg.primitives {
		mustHaveKinds(t, tg.name, secs)
	}
	if !r.OK() {
		t.Errorf("%s: %d violations, %d hung calls", tg.name, r.Violations, r.Hung)
	}
	return r
}

// spawnWorker starts this test binary as a checker worker running spec,
// its output logged to dir/worker-<proc>.log; it is killed at cleanup.
func spawnWorker(t *testing.T, dir string, spec workerSpec) *exec.Cmd {
	t.Helper()
	raw, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
	log, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.log", spec.Proc)))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = log.Close() })
	return cmd
}

// awaitWorkers waits for every worker, each bounded by bound: a worker
// ends on its own after its run.
func awaitWorkers(t *testing.T, dir string, cmds []*exec.Cmd, bound time.Duration) {
	t.Helper()
	for i, cmd := range cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				path := filepath.Join(dir, fmt.Sprintf("worker-%d.log", i))
				t.Fatalf("worker %d: %v (66 is the race detector's); the end of %s:\n%s", i, err, path, logTail(path, 80))
			}
		case <-time.After(bound):
			t.Fatalf("worker %d did not finish", i)
		}
	}
}

// logTail returns n lines of the file at path (a worker's log, which the
// test's temporary directory takes away with it): the race detector's
// report if there is one, else the last lines; or why it cannot.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	text := string(b)
	if i := strings.Index(text, "WARNING: DATA RACE"); i >= 0 {
		text = text[i:] // the race detector's report, rather than what followed it
		lines := strings.SplitN(text, "\n", n+1)
		return strings.Join(lines[:min(n, len(lines))], "\n")
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// collect reads every worker's records.
func collect(t *testing.T, outs []string) ([]checker.Section, []checker.Call, int64) {
	t.Helper()
	var secs []checker.Section
	var calls []checker.Call
	var end int64
	for _, out := range outs {
		s, c, e := readRecords(t, out)
		secs, calls = append(secs, s...), append(calls, c...)
		end = max(end, e)
	}
	return secs, calls, end
}

// logErrors logs the most frequent errors of the run's calls.
func logErrors(t *testing.T, calls []checker.Call) {
	count := map[string]int{}
	for _, c := range calls {
		if c.Err != "" {
			msg, _, _ := strings.Cut(c.Err, "\n")
			if i := strings.Index(msg, "chaos/"); i >= 0 {
				// Drop the key, keep what follows it.
				rest := msg[i:]
				if j := strings.IndexAny(rest, "\" "); j >= 0 {
					rest = rest[j:]
				}
				msg = msg[:i] + "<key>" + rest
			}
			count[c.Op+": "+msg]++
		}
	}
	msgs := make([]string, 0, len(count))
	for m := range count {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool { return count[msgs[i]] > count[msgs[j]] })
	for _, m := range msgs[:min(len(msgs), 4)] {
		t.Logf("%5d x %s", count[m], m)
	}
}

// logRefused prints how many of the run's calls the engine's renewal
// back-pressure refused ("renewal is falling behind"), and of which ops.
func logRefused(t *testing.T, name string, calls []checker.Call) {
	byOp := map[string]int{}
	n := 0
	for _, c := range calls {
		if strings.Contains(c.Err, "renewal is falling behind") {
			byOp[c.Op]++
			n++
		}
	}
	line := fmt.Sprintf("REFUSED %s falling_behind=%d of %d calls %v", name, n, len(calls), byOp)
	t.Log(line)
	fmt.Println(line)
}

func readRecords(t *testing.T, path string) ([]checker.Section, []checker.Call, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("worker output: %v", err)
	}
	defer f.Close()
	var secs []checker.Section
	var calls []checker.Call
	var end int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var r workerRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch {
		case r.Sec != nil:
			secs = append(secs, *r.Sec)
		case r.Call != nil:
			calls = append(calls, *r.Call)
		case r.End != 0:
			end = r.End
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if end == 0 {
		t.Fatalf("%s: the worker did not finish its output", path)
	}
	return secs, calls, end
}

// networkFaults are the toxiproxy faults: a latency spike, connection
// resets, and a blackhole longer than ttl, so leases are lost in it.
func networkFaults(t *testing.T, px *faultProxy, ttl time.Duration) []fault {
	var undo func()
	return []fault{
		{name: "latency 250ms±100ms", dur: 2 * time.Second,
			do:   func() { undo = px.toxic(t, "latency", map[string]any{"latency": 250, "jitter": 100}) },
			undo: func() { undo() }},
		{name: "connection resets", dur: 500 * time.Millisecond,
			do:   func() { undo = px.toxic(t, "reset_peer", map[string]any{"timeout": 0}) },
			undo: func() { undo() }},
		{name: "blackhole", dur: ttl + ttl/2 + time.Second,
			do:   func() { undo = px.toxic(t, "timeout", map[string]any{"timeout": 0}) },
			undo: func() { undo() }},
	}
}

// serverFaults stop the server (SIGSTOP) for longer than ttl, then restart it.
// A server that can be killed apart from its restart (a testenv.Process)
// has its crash time taken once it and its children are dead, before the
// new one starts: a grant the old server made while the kill was under way
// died with it (a CI run saw one 7 ms after the fault began).
func serverFaults(s pausable, ttl time.Duration) []fault {
	var killed time.Time
	restart := fault{name: "server restart", dur: 0, do: s.Restart, crash: true}
	if k, ok := s.(interface{ Kill() }); ok {
		restart.do = func() {
			k.Kill()
			killed = time.Now()
			s.Restart()
		}
		restart.killed = &killed
	}
	return []fault{
		{name: "server SIGSTOP", dur: ttl + ttl/2 + time.Second, do: s.Pause, undo: s.Resume},
		restart,
	}
}

// mustHaveKinds fails unless a Primitives run completed sections of locks,
// semaphore permits and elections alike.
func mustHaveKinds(t *testing.T, name string, secs []checker.Section) {
	t.Helper()
	var locks, permits, terms int
	for _, s := range secs {
		switch {
		case s.Limit > 1:
			permits++
		case strings.HasPrefix(s.Key, "election/"):
			terms++
		default:
			locks++
		}
	}
	t.Logf("%s: %d lock sections, %d permits, %d terms", name, locks, permits, terms)
	if locks == 0 || permits == 0 || terms == 0 {
		t.Errorf("%s: a kind of section never completed: %d lock sections, %d permits, %d terms", name, locks, permits, terms)
	}
}

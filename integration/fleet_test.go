package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/failover"
	"github.com/cerberus-go/cerberus/internal/checker"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// fleetEnv is one fleet run's servers: a private redis-server as the
// primary (so a test can kill it), the shared ZooKeeper as the backup, and
// the shared Consul agent for the engine key, each process reaching the
// primary either directly or through a proxy that a test can stop (one
// pod's network path failing), and the key's Consul through another.
type fleetEnv struct {
	redis    *testenv.RedisServer
	px       *faultProxy // the proxied processes' path to the primary
	consulPx *faultProxy // every process's path to the engine key's Consul
	handlers []string    // with fleetRun.handlers: each worker's handler URL
}

// fleetRun describes one fleet run: which processes reach the primary
// through px, whether the configuration has an engine key (otherwise it
// says single_process: true), and the fault injected mid-run.
type fleetRun struct {
	name     string
	viaProxy []bool // one entry a process
	keyed    bool
	fault    func(*fleetEnv)
	// handlers: each worker serves Manager.Handler(true) on a loopback
	// port of its own (fleetEnv.handlers).
	handlers bool
}

// fleetResult is what a fleet run produced.
type fleetResult struct {
	checker.Result
	finals  []*workerFinal
	faultAt time.Time
}

const (
	fleetQuiet = 3 * time.Second // before the fault
	fleetAfter = 8 * time.Second // after it
)

// fleetConfig writes a process's configuration: the settings
// (200ms x 3 health checks, auto, fence, 1s watchdog), with the primary at
// redisAddr and, when keyed, the engine key at consulAddr.
func fleetConfig(t *testing.T, path, redisAddr, consulAddr, key string, keyed bool) {
	t.Helper()
	fleet := "single_process: true\n"
	if keyed {
		fleet = fmt.Sprintf("engine_key: {consul: %q, key: %q}\n", consulAddr, key)
	}
	body := fmt.Sprintf(`engines:
  - {name: primary, kind: redis, addrs: [%q]}
  - {name: backup, kind: zookeeper, addrs: [%q]}
health: {interval: 200ms, threshold: 3}
auto: true
fence: true
lease: {watchdog: 1s}
%s`, redisAddr, testenv.ZooKeeperAddr(t), fleet)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runFleet starts one worker process per entry of run.viaProxy, each
// running config.Open on its configuration and locking a few hot keys
// with fenced writes, injects run.fault after fleetQuiet, and judges the
// history with the reliability checker.
func runFleet(t *testing.T, run fleetRun) fleetResult {
	t.Helper()
	env := &fleetEnv{redis: testenv.StartRedis(t)}
	env.px = startProxy(t, env.redis.Addr)
	env.consulPx = startProxy(t, testenv.ConsulAddr(t))
	key := unique(t, "cerberus-test/fleet/"+run.name)
	dir := t.TempDir()
	f := startFence(t)
	prefix := unique(t, "fleet/"+run.name)
	var cmds []*exec.Cmd
	var outs []string
	for i, proxied := range run.viaProxy {
		addr := env.redis.Addr
		if proxied {
			addr = env.px.Addr()
		}
		cfg := filepath.Join(dir, fmt.Sprintf("cerberus-%d.yaml", i))
		fleetConfig(t, cfg, addr, env.consulPx.Addr(), key, run.keyed)
		if run.handlers {
			addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			env.handlers = append(env.handlers, "http://"+addr+"/")
		}
		spec := workerSpec{
			Proc: i, Config: cfg, Prefix: prefix, Keys: 2, Goroutines: 4,
			Duration: fleetQuiet + fleetAfter, TTL: time.Second, Hold: 2 * time.Millisecond,
			Call: 2 * time.Second, Fence: f.addr, MaxOps: 100000,
			Out: filepath.Join(dir, fmt.Sprintf("worker-%d.jsonl", i)),
		}
		if run.handlers {
			spec.HTTP = strings.TrimSuffix(strings.TrimPrefix(env.handlers[i], "http://"), "/")
		}
		cmds, outs = append(cmds, spawnWorker(t, dir, spec)), append(outs, spec.Out)
	}
	time.Sleep(fleetQuiet)
	res := fleetResult{faultAt: time.Now()}
	t.Logf("%s: %s fault", run.name, res.faultAt.Format("15:04:05.000"))
	run.fault(env)
	awaitWorkers(t, dir, cmds, fleetAfter+60*time.Second)
	secs, calls, end := collect(t, outs)
	res.Result = checker.Check(secs, calls, nil, nil, end)
	res.Faults = 1
	fmt.Println(res.Line("fleet/" + run.name))
	t.Logf("fenced resource: %d writes accepted, %d rejected", f.accepted, f.rejected)
	for _, ex := range res.Examples {
		t.Log(ex)
	}
	logErrors(t, calls)
	for i, out := range outs {
		fin := readFinal(t, out)
		res.finals = append(res.finals, fin)
		t.Logf("process %d (via proxy %t): on %s, epoch %d, switched %s; notes %q", i, run.viaProxy[i], fin.Active, fin.Epoch,
			sinceFault(res.faultAt, fin.Switched), fin.Notes)
	}
	if res.Sections == 0 {
		t.Fatalf("%s: no critical section completed: the run tested nothing", run.name)
	}
	return res
}

// readFinal reads a config-run worker's final state.
func readFinal(t *testing.T, path string) *workerFinal {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var r workerRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Final != nil {
			return r.Final
		}
	}
	t.Fatalf("%s: no final record", path)
	return nil
}

func sinceFault(at time.Time, ns int64) string {
	if ns == 0 {
		return "never"
	}
	return time.Unix(0, ns).Sub(at).Round(time.Millisecond).String() + " after the fault"
}

// requireOneEngine fails unless every process ended on want, at one
// epoch, and returns how long after the fault each switched (sorted).
func requireOneEngine(t *testing.T, res fleetResult, want string) []time.Duration {
	t.Helper()
	var took []time.Duration
	for i, fin := range res.finals {
		if fin.Active != want || fin.Epoch != res.finals[0].Epoch {
			t.Errorf("process %d ended on %s at epoch %d; want every process on %s at one epoch", i, fin.Active, fin.Epoch, want)
		}
		if fin.Switched != 0 {
			took = append(took, time.Unix(0, fin.Switched).Sub(res.faultAt))
		}
	}
	slices.Sort(took)
	return took
}

// stopPrimaryProxy ends the proxied processes' path to the primary.
func stopPrimaryProxy(env *fleetEnv) { env.px.p.Stop() }

// TestFleetPartialOutageDoesNotSplit is the split-brain scenario: two
// processes share an engine key; one reaches the primary through a proxy
// that dies, the other still reaches it. The one that lost the primary is
// outvoted (1 of 2 is no majority): it stays on the primary, where its
// calls fail, and says why; nobody switches, and no two holders overlap.
func TestFleetPartialOutageDoesNotSplit(t *testing.T) {
	res := runFleet(t, fleetRun{name: "partial", viaProxy: []bool{true, false}, keyed: true, fault: stopPrimaryProxy})
	if !res.OK() {
		t.Errorf("%d violations, %d hung calls", res.Violations, res.Hung)
	}
	if took := requireOneEngine(t, res, "primary"); len(took) != 0 {
		t.Errorf("%d processes switched although only one lost the primary", len(took))
	}
	if !slices.ContainsFunc(res.finals[0].Notes, func(n string) bool { return strings.HasPrefix(n, "outvoted: primary is down here") }) {
		t.Errorf("the cut-off process never said it was outvoted: notes %q", res.finals[0].Notes)
	}
}

// TestFleetMajorityOutageMovesEveryone: two of three processes lose the
// primary. That is a majority, so the fleet moves to the backup, and the
// process that still reaches the primary moves with it: every process
// ends on the backup at one epoch, with no overlap that was not told.
func TestFleetMajorityOutageMovesEveryone(t *testing.T) {
	res := runFleet(t, fleetRun{name: "majority", viaProxy: []bool{true, true, false}, keyed: true,
		fault: stopPrimaryProxy})
	if !res.OK() {
		t.Errorf("%d violations, %d hung calls", res.Violations, res.Hung)
	}
	took := requireOneEngine(t, res, "backup")
	t.Logf("switch after the fault, per process: %v", took)
}

// TestFleetPrimaryKillMovesEveryone: the primary redis-server is killed,
// so every process loses it; the fleet moves to the backup together. The
// time from the kill to each process's switch is printed (a FLEET line):
// health detection (3 x 200ms) plus the fleet decision.
func TestFleetPrimaryKillMovesEveryone(t *testing.T) {
	res := runFleet(t, fleetRun{name: "kill", viaProxy: []bool{false, false, false}, keyed: true,
		fault: func(env *fleetEnv) { env.redis.Kill() }})
	if !res.OK() {
		t.Errorf("%d violations, %d hung calls", res.Violations, res.Hung)
	}
	took := requireOneEngine(t, res, "backup")
	if len(took) != len(res.finals) {
		t.Fatalf("%d of %d processes switched", len(took), len(res.finals))
	}
	fmt.Printf("FLEET kill-to-switch: first %v, last %v (health 200ms x 3)\n", took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}

// TestFleetStaysWithoutConsul: the engine key's Consul becomes unreachable
// and then the primary dies. No fleet decision can be made, so no process
// switches; each says why.
func TestFleetStaysWithoutConsul(t *testing.T) {
	res := runFleet(t, fleetRun{name: "no-consul", viaProxy: []bool{false, false, false}, keyed: true,
		fault: func(env *fleetEnv) {
			env.consulPx.p.Stop()
			time.Sleep(500 * time.Millisecond)
			env.redis.Kill()
		}})
	if !res.OK() {
		t.Errorf("%d violations, %d hung calls", res.Violations, res.Hung)
	}
	if took := requireOneEngine(t, res, "primary"); len(took) != 0 {
		t.Errorf("%d processes switched without the engine key's Consul", len(took))
	}
	for i, fin := range res.finals {
		if !slices.ContainsFunc(fin.Notes, func(n string) bool { return strings.Contains(n, "no automatic switch until it answers") }) {
			t.Errorf("process %d never said the key's Consul was unreachable: notes %q", i, fin.Notes)
		}
	}
}

// TestSingleProcessSettingSplitsAFleet shows the risk the configuration
// refuses by default: two processes with auto and single_process (no
// engine key), one losing the primary, each decide alone, and the
// checker finds overlapping critical sections nobody was told about.
func TestSingleProcessSettingSplitsAFleet(t *testing.T) {
	res := runFleet(t, fleetRun{name: "unkeyed", viaProxy: []bool{true, false}, keyed: false,
		fault: stopPrimaryProxy})
	if res.finals[0].Active != "backup" || res.finals[1].Active != "primary" {
		t.Fatalf("want the cut-off process on backup and the other on primary, got %s and %s", res.finals[0].Active, res.finals[1].Active)
	}
	if res.Overlaps == 0 {
		t.Fatalf("no overlap between two processes on two engines: the checker cannot see the split")
	}
	fmt.Printf("FLEET single_process split: %d overlapping sections in %v\n", res.Overlaps, fleetAfter)
}

// handlerDoc is the part of a Handler's JSON the tests read.
type handlerDoc struct {
	Active string                 `json:"active"`
	Scope  string                 `json:"scope"`
	Switch *failover.SwitchReport `json:"switch"`
}

// callHandler sends a GET or a POST to a worker's handler and decodes the
// answer.
func callHandler(t *testing.T, method, url string) (int, handlerDoc) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0, handlerDoc{}
	}
	defer resp.Body.Close()
	var doc handlerDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Errorf("%s %s: %d, undecodable answer: %v", method, url, resp.StatusCode, err)
	}
	return resp.StatusCode, doc
}

// TestHandlerPostMovesTheFleet: three processes share an engine key, each
// serving its handler. One POST to one of them moves all three (the
// response lists three followers, and each one's GET says backup), and the
// checker finds no overlap that was not told across the switch.
func TestHandlerPostMovesTheFleet(t *testing.T) {
	var post handlerDoc
	var code int
	var gets []handlerDoc
	res := runFleet(t, fleetRun{name: "handler", viaProxy: []bool{false, false, false}, keyed: true, handlers: true,
		fault: func(env *fleetEnv) {
			code, post = callHandler(t, http.MethodPost, env.handlers[1]+"?engine=backup&wait=5s")
			for _, u := range env.handlers {
				_, d := callHandler(t, http.MethodGet, u)
				gets = append(gets, d)
			}
		}})
	if !res.OK() {
		t.Errorf("%d violations, %d hung calls", res.Violations, res.Hung)
	}
	if code != http.StatusOK || post.Switch == nil || post.Switch.Scope != failover.ScopeFleet || len(post.Switch.Followed) != 3 || !post.Switch.Done() {
		t.Fatalf("POST: %d %+v; want 200 and a fleet switch all three followed", code, post.Switch)
	}
	for i, d := range gets {
		if d.Active != "backup" || d.Scope != failover.ScopeFleet {
			t.Errorf("GET of process %d after the POST: active %q scope %q", i, d.Active, d.Scope)
		}
	}
	requireOneEngine(t, res, "backup")
}

// TestHandlerPostWithoutKeyIsLocal: without an engine key the handler's
// switch moves one process, and its answers say so.
func TestHandlerPostWithoutKeyIsLocal(t *testing.T) {
	var post, other handlerDoc
	var code int
	res := runFleet(t, fleetRun{name: "handler-local", viaProxy: []bool{false, false}, keyed: false, handlers: true,
		fault: func(env *fleetEnv) {
			code, post = callHandler(t, http.MethodPost, env.handlers[0]+"?engine=backup")
			_, other = callHandler(t, http.MethodGet, env.handlers[1])
		}})
	if code != http.StatusOK || post.Scope != failover.ScopeProcess || post.Switch == nil || post.Switch.Scope != failover.ScopeProcess {
		t.Fatalf("POST: %d %+v; want 200 and a process-scoped switch", code, post)
	}
	if post.Active != "backup" || other.Active != "primary" || res.finals[1].Active != "primary" {
		t.Fatalf("want only the process posted to on backup: %s and %s", post.Active, other.Active)
	}
}

package config

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cerberus-go/cerberus/internal/testenv"
	"github.com/cerberus-go/cerberus/metrics"
)

// activeView is what a service shows of its active engine: its handler's
// JSON and its metrics' active-engine gauge.
type activeView struct {
	Active        string `json:"active"`
	ActiveFrom    string `json:"active_from"`
	ActiveUnknown string `json:"active_unknown"`
	Process       string `json:"process_engine"`
	Engines       []struct {
		Name   string `json:"name"`
		Active bool   `json:"active"`
	} `json:"engines"`
	gauge map[string]float64
}

// marked lists the engines the handler's engine list marks active, and
// those whose gauge is 1.
func (v activeView) marked() (handler, gauge []string) {
	for _, e := range v.Engines {
		if e.Active {
			handler = append(handler, e.Name)
		}
		if v.gauge[e.Name] == 1 {
			gauge = append(gauge, e.Name)
		}
	}
	return handler, gauge
}

// viewsRig is one Service under an engine key on a private Consul, with
// its handler served and its metrics registered.
type viewsRig struct {
	agent     *testenv.Consul
	key, path string
	logs      syncBuffer
	srv       *httptest.Server
	reg       *prometheus.Registry
}

func newViewsRig(t *testing.T) *viewsRig {
	t.Helper()
	r := &viewsRig{agent: testenv.StartConsul(t), path: filepath.Join(t.TempDir(), "c.yaml"),
		key: fmt.Sprintf("cerberus-test/views/%d", time.Now().UnixNano())}
	body := fmt.Sprintf(`engines: [{name: a, kind: memory}, {name: b, kind: memory}, {name: c, kind: memory}]
health: {interval: 100ms, threshold: 2}
lease: {watchdog: 1s}
engine_key: {consul: %q, key: %q}
`, r.agent.Addr, r.key)
	if err := os.WriteFile(r.path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), r.path, slog.New(slog.NewTextHandler(&r.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	r.srv = httptest.NewServer(s.Failover.Handler(false))
	t.Cleanup(r.srv.Close)
	r.reg = prometheus.NewRegistry()
	if err := metrics.New(r.reg).Watch(r.reg, s.Failover); err != nil {
		t.Fatal(err)
	}
	return r
}

// view reads the handler's JSON and the active-engine gauges.
func (r *viewsRig) view(t *testing.T) activeView {
	t.Helper()
	var v activeView
	resp, err := http.Get(r.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	v.gauge = map[string]float64{}
	for _, name := range []string{"a", "b", "c"} {
		v.gauge[name] = activeGauge(t, r.reg, name)
	}
	return v
}

// await reads the views until ok holds, for at most 20s.
func (r *viewsRig) await(t *testing.T, what string, ok func(activeView) bool) activeView {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for v := r.view(t); ; v = r.view(t) {
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s; the views say %+v\nlog:\n%s", what, v, r.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEveryViewFollowsTheEngineKey: a Service under an engine key (on a
// private Consul) shows the key's engine in its handler and its metrics
// after a fleet switch; a pin added to the file moves nothing and is
// logged with the key and the command that moves the fleet; and once the
// key's Consul is killed, both views mark no engine and the handler says
// why, while the process keeps its engine.
func TestEveryViewFollowsTheEngineKey(t *testing.T) {
	r := newViewsRig(t)
	cfg, err := Load(r.path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Switch(context.Background(), cfg, "c", 5*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	v := r.await(t, "the views after the switch to c", func(v activeView) bool { return v.Active == "c" })
	if h, g := v.marked(); len(h) != 1 || h[0] != "c" || len(g) != 1 || g[0] != "c" ||
		v.ActiveFrom != "from engine key "+r.key {
		t.Fatalf("after the switch to c: handler marks %q, gauge %q, active_from %q; want c, c, from the key",
			h, g, v.ActiveFrom)
	}

	if err := SetEngine(r.path, "b"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(r.logs.String(), "engine key decides"); {
		if time.Now().After(deadline) {
			t.Fatalf("no warning after pinning b in the file:\n%s", r.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := r.logs.String(); !strings.Contains(l, r.key) || !strings.Contains(l, "cerberusctl use -config "+r.path+" b") {
		t.Errorf("the reload warning does not name both the key and the command:\n%s", l)
	}
	if v := r.view(t); v.Active != "c" || v.Process != "c" {
		t.Fatalf("after pinning b in the file: active %q, process %q; want c", v.Active, v.Process)
	}

	r.agent.Kill()
	v = r.await(t, "the views with the key's Consul killed", func(v activeView) bool { return v.Active == "" })
	if h, g := v.marked(); len(h) != 0 || len(g) != 0 || v.Process != "c" ||
		!strings.Contains(v.ActiveUnknown, "engine key "+r.key+" cannot be read") {
		t.Fatalf("with the key unreadable: handler marks %q, gauge %q, process %q, unknown %q; "+
			"want none, none, c, and why", h, g, v.Process, v.ActiveUnknown)
	}
}

// activeGauge returns the cerberus_active_engine gauge of engine as reg
// gathers it (so that the scrape hook runs), or -1 if reg has none.
func activeGauge(t *testing.T, reg *prometheus.Registry, engine string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cerberus_active_engine" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "engine" && l.GetValue() == engine {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestEmptyKeyMeansTheFirstEngine: under an engine key that no one has
// written, a Service whose file pins b is on a (the first engine), as
// ReadFleet (cerberusctl status) says, whatever each process's file pins:
// two processes started before and after an edit of the file would
// otherwise resolve the empty key to two engines.
func TestEmptyKeyMeansTheFirstEngine(t *testing.T) {
	key := fmt.Sprintf("cerberus-test/empty-key/%d", time.Now().UnixNano())
	path := filepath.Join(t.TempDir(), "c.yaml")
	body := fmt.Sprintf(`engines: [{name: a, kind: memory}, {name: b, kind: memory}]
engine: b
engine_key: {consul: %q, key: %q}
`, testenv.ConsulAddr(t), key)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for deadline := time.Now().Add(10 * time.Second); s.Failover.ActiveEngine().Name == ""; {
		if time.Now().After(deadline) {
			t.Fatalf("the key was never read: %+v", s.Failover.ActiveEngine())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	fl, err := ReadFleet(ctx, cfg)
	if a := s.Failover.ActiveEngine(); err != nil || s.Failover.Active() != "a" || a.Name != "a" || fl.Engine != "a" {
		t.Fatalf("empty key, file pins b: process on %s, its view %+v, ReadFleet %q (%v); want a everywhere",
			s.Failover.Active(), a, fl.Engine, err)
	}
}

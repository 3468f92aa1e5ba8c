package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/failover"
)

// TestMetricsFollowLocksAndSwitches drives a failover.Manager over two memory
// engines and reads every metric back from a real registry.
func TestMetricsFollowLocksAndSwitches(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	a, b := memory.New(), memory.New()
	f, err := failover.New([]failover.NamedEngine{{Name: "a", Engine: a}, {Name: "b", Engine: b}},
		failover.Options{OnSwitch: m.Switched})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Watch(reg, f); err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(f, cerberus.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	_, _ = c.Lock(short, "k")
	cancelShort()
	r, err := c.RLock(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Unlock(ctx)
	if err := f.SetActive("b"); err != nil {
		t.Fatal(err)
	}
	<-l.Done()

	checks := []struct {
		c    prometheus.Collector
		want float64
	}{
		{m.granted.WithLabelValues("a", "exclusive"), 1},
		{m.granted.WithLabelValues("a", "shared"), 1},
		{m.failures.WithLabelValues("a", "not_acquired"), 1},
		{m.failures.WithLabelValues("a", "context"), 1},
		{m.lost.WithLabelValues("a", "engine_switched"), 1},
		{m.held.WithLabelValues("a"), 0}, // granted twice, unlocked once, switched away once
		{m.switches.WithLabelValues("a", "b", "operator"), 1},
	}
	for i, ch := range checks {
		if got := testutil.ToFloat64(ch.c); got != ch.want {
			t.Errorf("check %d: got %v, want %v", i, got, ch.want)
		}
	}
	// The scrape hook refreshes the gauges from the manager's status.
	n, err := testutil.GatherAndCount(reg, "cerberus_acquire_seconds")
	if err != nil || n != 3 {
		t.Errorf("acquire histogram series: %d (%v), want 3 (granted, not_acquired, context)", n, err)
	}
	want := `
# HELP cerberus_active_engine 1 for the active engine (under an engine key, the key's), 0 for the others.
# TYPE cerberus_active_engine gauge
cerberus_active_engine{engine="a"} 0
cerberus_active_engine{engine="b"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cerberus_active_engine"); err != nil {
		t.Error(err)
	}
}

// TestFleetGauges: the fleet gauges follow what the fleet coordinator set.
func TestFleetGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	f, err := failover.New([]failover.NamedEngine{{Name: "a", Engine: memory.New()}}, failover.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := m.Watch(reg, f); err != nil {
		t.Fatal(err)
	}
	f.SetFleet(failover.FleetStatus{Scope: failover.ScopeFleet, Note: "outvoted: ...",
		Members: []failover.FleetMember{{Active: "a"}, {Active: "b"}, {Active: "b"}}})
	want := `
# HELP cerberus_fleet_degraded 1 while this process is outvoted by its fleet or cannot reach the engine key's Consul.
# TYPE cerberus_fleet_degraded gauge
cerberus_fleet_degraded 1
# HELP cerberus_fleet_processes Live processes of the fleet (engine_key) on each engine, as this process last read them.
# TYPE cerberus_fleet_processes gauge
cerberus_fleet_processes{engine="a"} 1
cerberus_fleet_processes{engine="b"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cerberus_fleet_degraded", "cerberus_fleet_processes"); err != nil {
		t.Fatal(err)
	}
	f.SetFleet(failover.FleetStatus{Scope: failover.ScopeFleet, Members: []failover.FleetMember{{Active: "a"}}})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP cerberus_fleet_degraded 1 while this process is outvoted by its fleet or cannot reach the engine key's Consul.
# TYPE cerberus_fleet_degraded gauge
cerberus_fleet_degraded 0
`), "cerberus_fleet_degraded"); err != nil {
		t.Fatal(err)
	}
}

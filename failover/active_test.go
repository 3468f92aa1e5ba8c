package failover_test

import (
	"strings"
	"testing"

	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/failover"
)

// TestDecideActive: the one rule. With an engine key, the key's engine
// whatever the pin, this process and the health say, and no engine when
// the key is unreadable or names no configured engine; without one, this
// process's engine, else the pin, else the first healthy engine.
func TestDecideActive(t *testing.T) {
	engines := []failover.EngineStatus{{Name: "primary", Healthy: true}, {Name: "backup", Healthy: true},
		{Name: "pg", Healthy: true}}
	primaryDown := []failover.EngineStatus{{Name: "primary"}, {Name: "backup", Healthy: true}, {Name: "pg"}}
	for _, tc := range []struct {
		name      string
		in        failover.ActiveFacts
		want      string
		from      string
		unknownAs string
	}{
		{"key decides over the pin and the process", failover.ActiveFacts{Key: "k", KeyEngine: "pg",
			Process: "primary", Pin: "backup", Engines: engines}, "pg", failover.FromEngineKey, ""},
		{"key decides over health", failover.ActiveFacts{Key: "k", KeyEngine: "primary",
			Engines: primaryDown}, "primary", failover.FromEngineKey, ""},
		{"unreadable key: unknown, not the pin", failover.ActiveFacts{Key: "k", KeyErr: "connection refused",
			Process: "pg", Pin: "backup", Engines: engines}, "", failover.FromEngineKey,
			"engine key k cannot be read: connection refused"},
		{"key names no engine", failover.ActiveFacts{Key: "k", KeyEngine: "nope", Engines: engines}, "",
			failover.FromEngineKey, `engine key k names "nope"`},
		{"no key: the process", failover.ActiveFacts{Process: "pg", Pin: "backup", Engines: engines}, "pg",
			failover.FromProcess, ""},
		{"no key, from outside: the pin", failover.ActiveFacts{Pin: "backup", Engines: engines}, "backup",
			failover.FromPin, ""},
		{"unknown pin: first healthy", failover.ActiveFacts{Pin: "nope", Engines: primaryDown}, "backup",
			failover.FromHealth, ""},
		{"nothing healthy", failover.ActiveFacts{Engines: []failover.EngineStatus{{Name: "primary"}}}, "",
			failover.FromHealth, "no engine is healthy"},
	} {
		got := failover.DecideActive(tc.in)
		if got.Name != tc.want || got.From != tc.from || !strings.HasPrefix(got.Unknown, tc.unknownAs) ||
			(tc.unknownAs == "") != (got.Unknown == "") {
			t.Errorf("%s: got %+v; want %q from %q, unknown %q", tc.name, got, tc.want, tc.from, tc.unknownAs)
		}
	}
}

// TestActiveEngineFollowsTheFleet: a Manager's ActiveEngine is
// its own engine until a fleet coordinator reports, then the key's
// engine, and none while the key cannot be read.
func TestActiveEngineFollowsTheFleet(t *testing.T) {
	f, err := failover.New([]failover.NamedEngine{{Name: "a", Engine: memory.New()},
		{Name: "b", Engine: memory.New()}}, failover.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if a := f.ActiveEngine(); a.Name != "a" || a.From != failover.FromProcess {
		t.Fatalf("without a fleet: %+v, want a from this process", a)
	}
	f.SetFleet(failover.FleetStatus{Scope: failover.ScopeFleet, Key: "k", Engine: "b"})
	if a := f.ActiveEngine(); a.Name != "b" || a.Source() != "from engine key k" {
		t.Fatalf("under the key: %+v, want b from engine key k", a)
	}
	f.SetFleet(failover.FleetStatus{Scope: failover.ScopeFleet, Key: "k", Engine: "b", KeyError: "refused"})
	if a := f.ActiveEngine(); a.Name != "" || !strings.Contains(a.Unknown, "refused") || f.Active() != "a" {
		t.Fatalf("key unreadable: %+v (process on %s), want none and why", a, f.Active())
	}
}

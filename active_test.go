package cerberus_test

import (
	"strings"
	"testing"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/memory"
)

// TestDecideActive: the one rule. With an engine key, the key's engine
// whatever the pin, this process and the health say, and no engine when
// the key is unreadable or names no configured engine; without one, this
// process's engine, else the pin, else the first healthy engine.
func TestDecideActive(t *testing.T) {
	engines := []cerberus.EngineStatus{{Name: "primary", Healthy: true}, {Name: "backup", Healthy: true},
		{Name: "pg", Healthy: true}}
	primaryDown := []cerberus.EngineStatus{{Name: "primary"}, {Name: "backup", Healthy: true}, {Name: "pg"}}
	for _, tc := range []struct {
		name      string
		in        cerberus.ActiveFacts
		want      string
		from      string
		unknownAs string
	}{
		{"key decides over the pin and the process", cerberus.ActiveFacts{Key: "k", KeyEngine: "pg",
			Process: "primary", Pin: "backup", Engines: engines}, "pg", cerberus.FromEngineKey, ""},
		{"key decides over health", cerberus.ActiveFacts{Key: "k", KeyEngine: "primary",
			Engines: primaryDown}, "primary", cerberus.FromEngineKey, ""},
		{"unreadable key: unknown, not the pin", cerberus.ActiveFacts{Key: "k", KeyErr: "connection refused",
			Process: "pg", Pin: "backup", Engines: engines}, "", cerberus.FromEngineKey,
			"engine key k cannot be read: connection refused"},
		{"key names no engine", cerberus.ActiveFacts{Key: "k", KeyEngine: "nope", Engines: engines}, "",
			cerberus.FromEngineKey, `engine key k names "nope"`},
		{"no key: the process", cerberus.ActiveFacts{Process: "pg", Pin: "backup", Engines: engines}, "pg",
			cerberus.FromProcess, ""},
		{"no key, from outside: the pin", cerberus.ActiveFacts{Pin: "backup", Engines: engines}, "backup",
			cerberus.FromPin, ""},
		{"unknown pin: first healthy", cerberus.ActiveFacts{Pin: "nope", Engines: primaryDown}, "backup",
			cerberus.FromHealth, ""},
		{"nothing healthy", cerberus.ActiveFacts{Engines: []cerberus.EngineStatus{{Name: "primary"}}}, "",
			cerberus.FromHealth, "no engine is healthy"},
	} {
		got := cerberus.DecideActive(tc.in)
		if got.Name != tc.want || got.From != tc.from || !strings.HasPrefix(got.Unknown, tc.unknownAs) ||
			(tc.unknownAs == "") != (got.Unknown == "") {
			t.Errorf("%s: got %+v; want %q from %q, unknown %q", tc.name, got, tc.want, tc.from, tc.unknownAs)
		}
	}
}

// TestFailoverActiveEngineFollowsTheFleet: a Failover's ActiveEngine is
// its own engine until a fleet coordinator reports, then the key's
// engine, and none while the key cannot be read.
func TestFailoverActiveEngineFollowsTheFleet(t *testing.T) {
	f, err := cerberus.NewFailover([]cerberus.NamedEngine{{Name: "a", Engine: memory.New()},
		{Name: "b", Engine: memory.New()}}, cerberus.FailoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if a := f.ActiveEngine(); a.Name != "a" || a.From != cerberus.FromProcess {
		t.Fatalf("without a fleet: %+v, want a from this process", a)
	}
	f.SetFleet(cerberus.FleetStatus{Scope: cerberus.ScopeFleet, Key: "k", Engine: "b"})
	if a := f.ActiveEngine(); a.Name != "b" || a.Source() != "from engine key k" {
		t.Fatalf("under the key: %+v, want b from engine key k", a)
	}
	f.SetFleet(cerberus.FleetStatus{Scope: cerberus.ScopeFleet, Key: "k", Engine: "b", KeyError: "refused"})
	if a := f.ActiveEngine(); a.Name != "" || !strings.Contains(a.Unknown, "refused") || f.Active() != "a" {
		t.Fatalf("key unreadable: %+v (process on %s), want none and why", a, f.Active())
	}
}

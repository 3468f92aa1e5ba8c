package config

import (
	"strings"
	"testing"

	"github.com/cerberus-go/cerberus/failover"
)

// TestDecide runs the fleet rule over members' reports: a quorum of live
// processes must see the fleet's engine down before it moves, and the
// target must be healthy for a quorum too.
func TestDecide(t *testing.T) {
	order := []string{"primary", "backup", "third"}
	m := func(down ...string) failover.FleetMember { return failover.FleetMember{Down: down} }
	on := func(engine, reason string) keyValue { return keyValue{Engine: engine, Reason: reason} }
	auto := fleetPolicy{auto: true}
	for _, tc := range []struct {
		name    string
		cur     keyValue
		members []failover.FleetMember
		self    int // index of this process in members
		p       fleetPolicy
		to      string
		note    string // a prefix of the note, if any
	}{
		{"one of two sees the primary down", on("primary", ""), []failover.FleetMember{m("primary"), m()}, 0, auto, "", "outvoted: primary is down here, but for 1 of 2"},
		{"two of three", on("primary", ""), []failover.FleetMember{m("primary"), m("primary"), m()}, 2, auto, "backup", ""},
		{"all", on("primary", "operator"), []failover.FleetMember{m("primary"), m("primary")}, 0, auto, "backup", ""},
		{"auto off", on("primary", ""), []failover.FleetMember{m("primary"), m("primary")}, 0, fleetPolicy{}, "", ""},
		{"backup down too", on("primary", ""), []failover.FleetMember{m("primary", "backup"), m("primary", "backup")}, 0, auto, "third", ""},
		{"nothing healthy", on("primary", ""), []failover.FleetMember{m("primary", "backup", "third"), m("primary", "backup", "third")}, 0, auto, "", "primary is down for 2 of 2 processes, but no other"},
		{"target healthy for a minority only", on("primary", ""), []failover.FleetMember{m("primary", "backup", "third"), m("primary", "backup", "third"), m("primary")}, 0, auto, "", "primary is down for 3 of 3"},
		{"quorum of one", on("primary", ""), []failover.FleetMember{m("primary"), m(), m()}, 0, fleetPolicy{auto: true, quorum: 1}, "backup", ""},
		{"quorum of three", on("primary", ""), []failover.FleetMember{m("primary"), m("primary"), m()}, 0, fleetPolicy{auto: true, quorum: 3}, "", "outvoted"},
		{"failback", on("backup", "failover"), []failover.FleetMember{m(), m("primary"), m()}, 0, fleetPolicy{auto: true, failback: true}, "primary", ""},
		{"no failback without the setting", on("backup", "failover"), []failover.FleetMember{m(), m()}, 0, auto, "", ""},
		{"no failback from an operator's pin", on("backup", "operator"), []failover.FleetMember{m(), m()}, 0, fleetPolicy{auto: true, failback: true}, "", ""},
		{"no failback to an engine a majority sees down", on("backup", "failover"), []failover.FleetMember{m("primary"), m("primary"), m()}, 0, fleetPolicy{auto: true, failback: true}, "", ""},
		{"nobody registered", on("primary", ""), nil, 0, auto, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var self failover.FleetMember
			if len(tc.members) > 0 {
				self = tc.members[tc.self]
			}
			d := decide(order, tc.cur, tc.members, self, tc.p)
			if d.to != tc.to {
				t.Errorf("to = %q, want %q (note %q)", d.to, tc.to, d.note)
			}
			if !strings.HasPrefix(d.note, tc.note) || (tc.note == "") != (d.note == "") {
				t.Errorf("note = %q, want one starting %q", d.note, tc.note)
			}
		})
	}
}

func TestParseKeyValue(t *testing.T) {
	for in, want := range map[string]keyValue{
		`{"engine":"backup","epoch":7,"reason":"failover"}`: {Engine: "backup", Epoch: 7, Reason: "failover"},
		"backup\n": {Engine: "backup", Reason: "operator"},
		"":         {Engine: "", Reason: "operator"},
		"{broken":  {Engine: "{broken", Reason: "operator"},
	} {
		if got := parseKeyValue([]byte(in)); got != want {
			t.Errorf("parseKeyValue(%q) = %+v, want %+v", in, got, want)
		}
	}
}

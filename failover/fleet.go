package failover

import (
	"fmt"
	"strings"
	"time"
)

// Scopes of a switch: what moves when the active engine changes.
const (
	// ScopeProcess: this process decides alone (SetActive, automatic
	// failover without a fleet key). Other processes of the same service
	// may stay on the old engine and grant the same keys there.
	ScopeProcess = "process"
	// ScopeFleet: a shared key (package config's engine_key) decides, and
	// every process that follows it moves together.
	ScopeFleet = "fleet"
)

// FleetStatus is what a Manager knows of the fleet it belongs to, as its
// fleet coordinator (package config's engine_key) last reported it. The
// zero value (Scope "") means no coordinator: switches are this
// process's alone.
type FleetStatus struct {
	// Scope is ScopeFleet under a coordinator, else ScopeProcess.
	Scope string `json:"scope"`
	// Key is the shared key that decides, such as a Consul KV key.
	Key string `json:"key,omitempty"`
	// Engine and Epoch are the key's value as last read: the engine the
	// fleet is on, and the epoch every process uses on it.
	Engine string `json:"engine,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
	// KeyError says why the key's value is not known now: its server
	// cannot be reached, or it was not read yet. Engine and Epoch are then
	// the last value read, if any, and may be stale; ActiveEngine names no
	// engine meanwhile.
	KeyError string `json:"key_error,omitempty"`
	// Members are the live processes of the fleet, this one included.
	Members []FleetMember `json:"members,omitempty"`
	// Note says why the fleet did not follow this process's health view
	// (outvoted, no healthy engine to go to), or why the coordinator
	// cannot decide (its key's server unreachable). Empty when nothing is
	// amiss.
	Note string `json:"note,omitempty"`
	// Updated is when the coordinator last reported.
	Updated time.Time `json:"updated"`
}

// FleetMember is one live process of a fleet, as it registered itself.
type FleetMember struct {
	ID     string `json:"id"`
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	Active string `json:"active"`
	Epoch  uint64 `json:"epoch"`
	// Since is when the process last switched (or started).
	Since time.Time `json:"since"`
	// Down lists the engines this process's health checks mark down.
	Down []string `json:"down,omitempty"`
	// Self marks the process that reports this status.
	Self bool `json:"self,omitempty"`
}

// ByEngine reports how the members split over engines: one entry an
// engine, with how many members are on it, in no particular order. A fleet
// that agrees has one entry.
func (s FleetStatus) ByEngine() map[string]int {
	on := map[string]int{}
	for _, m := range s.Members {
		on[m.Active]++
	}
	return on
}

// SetFleet records the fleet's status, for Fleet, the Handler and
// metrics. A fleet coordinator calls it; services do not need to.
func (m *Manager) SetFleet(s FleetStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fleet = s
}

// Fleet returns the fleet status last set by SetFleet, or one with Scope
// ScopeProcess if none was.
func (m *Manager) Fleet() FleetStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.fleet
	if s.Scope == "" {
		s.Scope = ScopeProcess
	}
	s.Members = append([]FleetMember(nil), s.Members...)
	return s
}

// SwitchReport is the outcome of a switch asked of the Handler or of a
// fleet coordinator: where the switch went and, for a fleet, which live
// processes have followed so far.
type SwitchReport struct {
	// Scope is ScopeFleet when the switch went through the fleet's shared
	// key, ScopeProcess when only this process switched.
	Scope  string `json:"scope"`
	Engine string `json:"engine"`
	Epoch  uint64 `json:"epoch"`
	// Followed are the live processes on Engine at Epoch or later,
	// Stragglers those that are not (yet). Both are empty for ScopeProcess.
	Followed   []FleetMember `json:"followed,omitempty"`
	Stragglers []FleetMember `json:"stragglers,omitempty"`
}

// Done reports whether every live process followed.
func (r SwitchReport) Done() bool { return len(r.Stragglers) == 0 }

// String says it in one line, such as "3 of 4 processes on backup (epoch
// 5); not yet: host-a/123 on primary", or "only this process switched to
// backup (epoch 2)".
func (r SwitchReport) String() string {
	if r.Scope != ScopeFleet {
		return fmt.Sprintf("only this process switched to %s (epoch %d)", r.Engine, r.Epoch)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d processes on %s (epoch %d)", len(r.Followed),
		len(r.Followed)+len(r.Stragglers), r.Engine, r.Epoch)
	for i, m := range r.Stragglers {
		if i == 0 {
			b.WriteString("; not yet: ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s/%d on %s", m.Host, m.PID, m.Active)
	}
	return b.String()
}

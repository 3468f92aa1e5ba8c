package cerberus

import "time"

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

// FleetStatus is what a Failover knows of the fleet it belongs to, as its
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
func (f *Failover) SetFleet(s FleetStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fleet = s
}

// Fleet returns the fleet status last set by SetFleet, or one with Scope
// ScopeProcess if none was.
func (f *Failover) Fleet() FleetStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.fleet
	if s.Scope == "" {
		s.Scope = ScopeProcess
	}
	s.Members = append([]FleetMember(nil), s.Members...)
	return s
}

package failover

import "fmt"

// Where the answer to "which engine is active" comes from: ActiveEngine.From.
const (
	// FromEngineKey: a fleet's engine key (package config's engine_key)
	// decides; a configuration file's pin and the health of the engines do
	// not.
	FromEngineKey = "engine key"
	// FromProcess: no engine key; the process that answers uses this
	// engine (its pin, SetActive or its own automatic failover chose it).
	FromProcess = "this process"
	// FromPin: no engine key; the configuration file pins the engine.
	FromPin = "pinned"
	// FromHealth: no engine key and no pin; the first healthy engine in
	// order, as a process starting now would take.
	FromHealth = "first healthy"
)

// ActiveFacts is what is known when deciding which engine is active; see
// DecideActive. Fill in what the viewer knows: a process knows its own
// engine (Process), an operator's tool reading the configuration and the
// engine key from outside does not.
type ActiveFacts struct {
	// Key is the engine key that decides for the fleet, "" without one.
	Key string
	// KeyEngine is the engine the key's value names (an empty value
	// resolved to its default), when KeyErr is "".
	KeyEngine string
	// KeyErr says why the key's value is not known now (its server cannot
	// be reached, or it was not read yet); "" when KeyEngine holds it.
	KeyErr string
	// Process is the engine the viewing process uses, "" when the viewer
	// is not a process of the fleet.
	Process string
	// Pin is the engine the configuration file pins, "" for none.
	Pin string
	// Engines are the configured engines in priority order, with their
	// health as the viewer saw it (Name and Healthy are used).
	Engines []EngineStatus
}

// ActiveEngine says which engine is active and how that was decided.
type ActiveEngine struct {
	// Name is the active engine, or "" when it cannot be known.
	Name string `json:"name"`
	// From is FromEngineKey, FromProcess, FromPin or FromHealth.
	From string `json:"from"`
	// Key is the engine key, with From FromEngineKey.
	Key string `json:"key,omitempty"`
	// Unknown says why Name is "", when it is.
	Unknown string `json:"unknown,omitempty"`
}

// Source says where the answer came from, such as "from engine key
// myapp/cerberus/engine" or "pinned in the configuration".
func (a ActiveEngine) Source() string {
	switch a.From {
	case FromEngineKey:
		return "from engine key " + a.Key
	case FromProcess:
		return "this process's engine"
	case FromPin:
		return "pinned in the configuration"
	}
	return "first healthy engine in order"
}

// DecideActive is the one rule every view of the active engine applies
// (cerberusctl status, Manager.Handler, the metrics' active-engine
// gauge): with an engine key the key's engine, or none when the key
// cannot be read (never a guess from the file, which does not decide
// then); without one, the viewing process's engine, else the pinned
// engine, else the first healthy one.
func DecideActive(in ActiveFacts) ActiveEngine {
	known := func(name string) bool {
		for _, e := range in.Engines {
			if e.Name == name {
				return true
			}
		}
		return false
	}
	if in.Key != "" {
		a := ActiveEngine{From: FromEngineKey, Key: in.Key}
		switch {
		case in.KeyErr != "":
			a.Unknown = fmt.Sprintf("engine key %s cannot be read: %s", in.Key, in.KeyErr)
		case !known(in.KeyEngine):
			a.Unknown = fmt.Sprintf("engine key %s names %q, which is not a configured engine", in.Key,
				in.KeyEngine)
		default:
			a.Name = in.KeyEngine
		}
		return a
	}
	switch {
	case in.Process != "":
		return ActiveEngine{Name: in.Process, From: FromProcess}
	case in.Pin != "" && known(in.Pin):
		return ActiveEngine{Name: in.Pin, From: FromPin}
	}
	for _, e := range in.Engines {
		if e.Healthy {
			return ActiveEngine{Name: e.Name, From: FromHealth}
		}
	}
	return ActiveEngine{From: FromHealth, Unknown: "no engine is healthy"}
}

// ActiveEngine applies DecideActive to what this Manager knows: under a
// fleet coordinator (SetFleet with ScopeFleet), the engine key's value as
// last read, or none while the key cannot be read; otherwise Active. Its
// Handler and package metrics show this; Active is still the engine this
// process's calls go to.
func (m *Manager) ActiveEngine() ActiveEngine {
	fl := m.Fleet()
	in := ActiveFacts{Process: m.Active(), Engines: m.Status()}
	if fl.Scope == ScopeFleet {
		in.Key, in.KeyEngine, in.KeyErr = fl.Key, fl.Engine, fl.KeyError
		if in.Key == "" {
			in.Key = "(unnamed)"
		}
	}
	return DecideActive(in)
}

package cerberus

import (
	"encoding/json"
	"errors"
	"net/http"
)

// Handler serves the manager's status, and operators' switches when
// allowSwitch is true, for a service to mount (behind its own
// authentication: a switch loses every lock held on the old engine).
//
//	GET                 200, JSON: {"active","epoch","scope","engines":[...],"fleet"}
//	POST ?engine=NAME   SetActive(NAME), then 200 with the new status;
//	                    400 without a name, 404 for an unknown engine,
//	                    403 when switching is not allowed
//
// Any other method gets 405.
func (f *Failover) Handler(allowSwitch bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		case http.MethodPost:
			if !allowSwitch {
				http.Error(w, "cerberus: switching is not allowed here", http.StatusForbidden)
				return
			}
			name := r.FormValue("engine")
			if name == "" {
				http.Error(w, "cerberus: name the engine: ?engine=NAME", http.StatusBadRequest)
				return
			}
			if err := f.SetActive(name); err != nil {
				code := http.StatusInternalServerError
				if errors.Is(err, ErrUnknownEngine) {
					code = http.StatusNotFound
				}
				http.Error(w, err.Error(), code)
				return
			}
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			http.Error(w, "cerberus: method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f.statusDoc())
	})
}

// statusDoc is the JSON form of Status and Fleet. Scope is "process" when
// a switch here moves this process only.
type statusDoc struct {
	Active  string          `json:"active"`
	Epoch   uint64          `json:"epoch"`
	Scope   string          `json:"scope"`
	Engines []engineDocItem `json:"engines"`
	Fleet   *FleetStatus    `json:"fleet,omitempty"`
}

type engineDocItem struct {
	Name      string  `json:"name"`
	Active    bool    `json:"active"`
	Healthy   bool    `json:"healthy"`
	Failures  int     `json:"failures"`
	LatencyMS float64 `json:"latency_ms"`
	LastError string  `json:"last_error,omitempty"`
}

func (f *Failover) statusDoc() statusDoc {
	doc := statusDoc{Active: f.Active(), Epoch: f.Epoch()}
	fl := f.Fleet()
	doc.Scope = fl.Scope
	if fl.Scope == ScopeFleet {
		doc.Fleet = &fl
	}
	for _, s := range f.Status() {
		doc.Engines = append(doc.Engines, engineDocItem{Name: s.Name, Active: s.Active, Healthy: s.Healthy,
			Failures: s.Failures, LatencyMS: float64(s.Latency.Microseconds()) / 1000, LastError: s.LastErr})
	}
	return doc
}

package failover

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"
)

// Handler serves the manager's status, and operators' actions (switch
// and force release) when allowOps is true, for a service to mount behind
// its own authentication (a switch loses every lock held on the old
// engine, a release the key's holders; see the example with a bearer
// token).
//
//	GET                        200, JSON: {"active","active_from","epoch","scope","engines":[...],"fleet"}
//	GET ?prefix=P[&limit=N]    the same and "locks": the keys held under P on
//	                           every engine (P "*" for every key; N from 1
//	                           to engine.MaxListLimit, default
//	                           engine.DefaultListLimit); 400 for an empty
//	                           or invalid P or a bad N, before any I/O
//	GET, Accept: text/html     the status page: the same answer as one
//	                           self-contained HTML page (no script, no
//	                           external asset), with a form for ?prefix;
//	                           with allowOps, POST forms to switch and
//	                           to force-release each listed key
//	POST ?engine=NAME[&wait=D] switch, then 200 with {"switch": report, ...status}
//	                           (202 if processes of the fleet have not
//	                           followed within D); 400 without a name or
//	                           with a bad wait, 404 for an unknown engine,
//	                           403 when operator actions are not allowed
//	POST release=KEY&confirm=KEY[&engine=NAME]
//	                           force release (ReleaseOn) on NAME or the
//	                           active engine, then 200 with {"released",
//	                           "engine","by","holders":[{"mode","token","value"}]};
//	                           400 when confirm is not the key or the key
//	                           is invalid, 404 for a key nobody holds or an
//	                           unknown engine, 403 when operator actions
//	                           are not allowed; who asked is Options.Caller's
//	                           answer (default: the remote address), logged
//	                           with key, engine and tokens
//
// A POST from a browser (an Accept that prefers text/html, as the status
// page's forms send) gets a short HTML page saying what was done, or why
// nothing was, with a link back to the status page, and the same status
// code.
//
// A GET never changes anything: one that names an action (release,
// confirm, engine or wait) is refused with 405 and changes nothing.
//
// Under a fleet coordinator (Options.Switch, set by package config
// when an engine key is configured), a POST moves the whole fleet through
// the shared key and waits up to D (default 10s) for every live process
// to follow; the report lists who followed and who did not. Without one,
// a POST moves this process only (SetActive), and the report's scope is
// "process" to say so.
//
// "active" is ActiveEngine's answer, the one every view gives: under an
// engine key the key's engine, or "" (with "active_unknown" saying why)
// while the key cannot be read; "active_from" says which rule decided.
// "process_engine" is the engine this process's calls go to (Active).
//
// Any other method gets 405.
func (m *Manager) Handler(allowOps bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep *SwitchReport
		code := http.StatusOK
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if msg := actionInGet(r.URL.Query()); msg != "" {
				w.Header().Set("Allow", "POST")
				http.Error(w, msg, http.StatusMethodNotAllowed)
				return
			}
			m.serveGet(w, r, allowOps)
			return
		case http.MethodPost:
			if !allowOps {
				postError(w, r, "cerberus: operator actions (switch, release) are not allowed here", http.StatusForbidden)
				return
			}
			if r.FormValue("release") != "" || r.Form.Has("release") || r.Form.Has("confirm") {
				m.serveRelease(w, r)
				return
			}
			sw, err := m.handleSwitch(r)
			if err != nil {
				postError(w, r, err.Error(), switchErrCode(err))
				return
			}
			rep = &sw
			if !sw.Done() {
				code = http.StatusAccepted
			}
			if wantsHTML(r.Header.Values("Accept")) {
				writeOutcome(w, code, switchOutcome(sw))
				return
			}
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			http.Error(w, "cerberus: method not allowed", http.StatusMethodNotAllowed)
			return
		}
		doc := m.statusDoc()
		doc.Switch = rep
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(doc)
	})
}

// actionInGet says why a GET whose query names an operator action (a
// switch's engine or wait, a release) is refused, or "" for a plain GET:
// actions are POST-only, and a GET that tries one must not look as if it
// had worked.
func actionInGet(q url.Values) string {
	switch {
	case q.Has("release") || q.Has("confirm"):
		return "cerberus: a release must be a POST (form release=KEY&confirm=KEY); nothing was changed"
	case q.Has("engine") || q.Has("wait"):
		return "cerberus: a switch must be a POST (form engine=NAME[&wait=D]); nothing was changed"
	}
	return ""
}

// errBadSwitch is a POST the handler cannot act on.
var errBadSwitch = errors.New("cerberus: bad switch request")

func switchErrCode(err error) int {
	switch {
	case errors.Is(err, errBadSwitch):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnknownEngine):
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

// handleSwitch carries out a POST: through the fleet's Switch if there is
// one, else SetActive.
func (m *Manager) handleSwitch(r *http.Request) (SwitchReport, error) {
	name := r.FormValue("engine")
	if name == "" {
		return SwitchReport{}, errors.Join(errBadSwitch,
			errors.New("cerberus: name the engine: ?engine=NAME"))
	}
	if !m.has(name) {
		return SwitchReport{}, errors.Join(ErrUnknownEngine, errors.New("cerberus: unknown engine "+name))
	}
	wait := time.Duration(0)
	if s := r.FormValue("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > time.Minute {
			return SwitchReport{}, errors.Join(errBadSwitch,
				errors.New("cerberus: wait must be a duration within [0, 1m], such as 5s"))
		}
		wait = d
	}
	m.mu.Lock()
	sw := m.opts.Switch
	m.mu.Unlock()
	if sw == nil {
		if err := m.SetActive(name); err != nil {
			return SwitchReport{}, err
		}
		return SwitchReport{Scope: ScopeProcess, Engine: m.Active(), Epoch: m.Epoch()}, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), max(wait, DefaultFleetWait)+5*time.Second)
	defer cancel()
	return sw(ctx, name, wait)
}

// DefaultFleetWait is how long a fleet switch through the Handler waits for
// the fleet to follow when the request gives no wait.
const DefaultFleetWait = 10 * time.Second

// has reports whether name is one of m's engines.
func (m *Manager) has(name string) bool {
	for _, ne := range m.engines {
		if ne.Name == name {
			return true
		}
	}
	return false
}

// statusDoc is the JSON form of Status and Fleet. Scope is "process" when
// a switch here moves this process only.
type statusDoc struct {
	Active        string          `json:"active"`
	ActiveFrom    string          `json:"active_from"`
	ActiveUnknown string          `json:"active_unknown,omitempty"`
	Process       string          `json:"process_engine"`
	Epoch         uint64          `json:"epoch"`
	Scope         string          `json:"scope"`
	Engines       []engineDocItem `json:"engines"`
	Fleet         *FleetStatus    `json:"fleet,omitempty"`
	Switch        *SwitchReport   `json:"switch,omitempty"`
	Locks         *locksDoc       `json:"locks,omitempty"`
}

type engineDocItem struct {
	Name      string  `json:"name"`
	Active    bool    `json:"active"`
	Healthy   bool    `json:"healthy"`
	Failures  int     `json:"failures"`
	LatencyMS float64 `json:"latency_ms"`
	LastError string  `json:"last_error,omitempty"`
}

func (m *Manager) statusDoc() statusDoc {
	a := m.ActiveEngine()
	doc := statusDoc{Active: a.Name, ActiveFrom: a.Source(), ActiveUnknown: a.Unknown,
		Process: m.Active(), Epoch: m.Epoch()}
	fl := m.Fleet()
	doc.Scope = fl.Scope
	if fl.Scope == ScopeFleet {
		doc.Fleet = &fl
	}
	for _, s := range m.Status() {
		doc.Engines = append(doc.Engines,
			engineDocItem{Name: s.Name, Active: s.Name == a.Name, Healthy: s.Healthy,
				Failures: s.Failures, LatencyMS: float64(s.Latency.Microseconds()) / 1000,
				LastError: s.LastErr})
	}
	return doc
}

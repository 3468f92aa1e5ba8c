package failover

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

//go:embed page.html
var pageSource string

// pageTemplate is the status page: one self-contained document (inline
// CSS, no script, no external asset). html/template escapes every value.
var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"ago":     ago,
	"until":   untilTime,
	"waiters": waitersText,
	"stamp":   stamp,
}).Parse(pageSource))

// pageData is what the status page renders.
type pageData struct {
	Doc   statusDoc
	Allow bool // operator forms (switch, release) are shown
	// Prefix and Limit are the listing form's values as given.
	Prefix, Limit string
	ListErr       string
	Agreement     string // one line: does the fleet agree?
	Agree         bool
	Now           time.Time
}

// serveGet answers a GET or HEAD: the status as JSON, or as the status
// page when the request prefers text/html; with ?prefix, the lock
// inventory of every engine too.
func (m *Manager) serveGet(w http.ResponseWriter, r *http.Request, allow bool) {
	q, qerr := parseListQuery(r.URL.Query(), m.Limits().MaxKeyLen)
	html := wantsHTML(r.Header.Values("Accept"))
	if qerr != nil && !html {
		http.Error(w, qerr.Error(), http.StatusBadRequest)
		return
	}
	doc := m.statusDoc()
	if q.prefix != "" {
		doc.Locks = m.listLocks(r.Context(), q)
	}
	if !html {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
		return
	}
	d := pageData{Doc: doc, Allow: allow, Prefix: r.URL.Query().Get("prefix"),
		Limit: r.URL.Query().Get("limit"), Now: time.Now()}
	code := http.StatusOK
	if qerr != nil {
		d.ListErr, code = qerr.Error(), http.StatusBadRequest
	}
	d.Agreement, d.Agree = agreement(doc.Fleet)
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, d); err != nil {
		http.Error(w, "cerberus: status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// wantsHTML reports whether an Accept header prefers text/html to JSON:
// text/html's quality is above application/json's, where wildcards
// (*/*, text/*, application/*) count for the type they cover. A browser's
// Accept does; curl's */* and an empty header do not.
func wantsHTML(accept []string) bool {
	htmlQ, jsonQ := 0.0, 0.0
	htmlSpec, jsonSpec := 0, 0 // how specific the range that set each quality is
	for _, part := range strings.Split(strings.Join(accept, ","), ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if q, err = strconv.ParseFloat(s, 64); err != nil {
				continue
			}
		}
		if n := specificity(mt, "text/html"); n > htmlSpec {
			htmlQ, htmlSpec = q, n
		}
		if n := specificity(mt, "application/json"); n > jsonSpec {
			jsonQ, jsonSpec = q, n
		}
	}
	return htmlQ > jsonQ
}

// specificity is how closely the media range mt covers typ: 3 exactly,
// 2 for type/*, 1 for */*, 0 not at all.
func specificity(mt, typ string) int {
	switch {
	case mt == typ:
		return 3
	case mt == typ[:strings.Index(typ, "/")]+"/*":
		return 2
	case mt == "*/*":
		return 1
	}
	return 0
}

// agreement says in one line whether the fleet's live processes are on
// one engine at one epoch.
func agreement(fl *FleetStatus) (string, bool) {
	if fl == nil {
		return "no fleet coordinator: this process decides alone", true
	}
	if len(fl.Members) == 0 {
		return "no live process registered", false
	}
	type at struct {
		engine string
		epoch  uint64
	}
	count := map[at]int{}
	for _, mb := range fl.Members {
		count[at{mb.Active, mb.Epoch}]++
	}
	if len(count) == 1 {
		mb := fl.Members[0]
		return fmt.Sprintf("agree: all %d processes on %s at epoch %d", len(fl.Members), mb.Active, mb.Epoch), true
	}
	var parts []string
	for a, n := range count {
		parts = append(parts, fmt.Sprintf("%d on %s at epoch %d", n, a.engine, a.epoch))
	}
	slices.Sort(parts)
	return "split: " + strings.Join(parts, ", "), false
}

// ago is how long ago t was, "-" when unknown.
func ago(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return now.Sub(*t).Round(time.Second).String() + " ago"
}

// untilTime is the time left before t, "-" when unknown.
func untilTime(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return "in " + t.Sub(now).Round(100*time.Millisecond).String()
}

// waitersText shows a waiter count, "?" when the engine cannot count.
func waitersText(n int) string {
	if n < 0 {
		return "?"
	}
	return strconv.Itoa(n)
}

// stamp is t in UTC to the second, "" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

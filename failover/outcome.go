package failover

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
)

// outcomeTemplate answers a POST from the status page's forms (a request
// that prefers text/html): what was done, or why nothing was, and a link
// back to the page. Self-contained like the page; html/template escapes
// every value.
var outcomeTemplate = template.Must(template.New("outcome").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>cerberus: {{.Title}}</title>
<style>body{font:15px/1.5 system-ui,sans-serif;margin:2em 3em;color:#1f2328;background:#f6f8fa}
h1{font-size:20px}.box{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:1em 1.5em;max-width:60em}
.err h1{color:#b42318}code{font:13px ui-monospace,monospace}</style></head>
<body><div class="box{{if .Failed}} err{{end}}"><h1>{{.Title}}</h1>
{{range .Lines}}<p>{{.}}</p>{{end}}<p><a href="?">Back to the status page</a></p></div></body></html>
`))

// outcome is what outcomeTemplate renders.
type outcome struct {
	Title  string
	Lines  []string
	Failed bool
}

// writeOutcome writes o as an HTML page with code.
func writeOutcome(w http.ResponseWriter, code int, o outcome) {
	var b bytes.Buffer
	if err := outcomeTemplate.Execute(&b, o); err != nil {
		http.Error(w, "cerberus: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// postError answers a POST that failed with code: plain text, or an HTML
// page for a browser's form.
func postError(w http.ResponseWriter, r *http.Request, msg string, code int) {
	if !wantsHTML(r.Header.Values("Accept")) {
		http.Error(w, msg, code)
		return
	}
	writeOutcome(w, code, outcome{Title: "Nothing was changed", Lines: []string{msg}, Failed: true})
}

// releaseOutcome is the HTML answer to a release that freed doc's holders.
func releaseOutcome(doc releaseDoc) outcome {
	o := outcome{Title: fmt.Sprintf("Released %q on %s", doc.Released, doc.Engine)}
	for _, h := range doc.Holders {
		o.Lines = append(o.Lines, fmt.Sprintf("Freed the %s holder with token %d (value %q).", h.Mode, h.Token, h.Value))
	}
	o.Lines = append(o.Lines, "Asked by "+doc.By+". The holders are told (ErrReleasedByOperator) by their next renewal; the next waiter is granted now.")
	return o
}

// switchOutcome is the HTML answer to a switch that rep reports.
func switchOutcome(rep SwitchReport) outcome {
	o := outcome{Title: "Switched to " + rep.Engine, Lines: []string{rep.String() + "."}}
	if !rep.Done() {
		o.Title = "Switching to " + rep.Engine
	}
	return o
}

package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// dashboardPath is the Grafana dashboard this package's metrics feed.
const dashboardPath = "../dashboards/cerberus.json"

// dashPanel is the part of a Grafana panel that holds queries; rows nest
// panels.
type dashPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// promqlNoise matches what is not a metric name in a PromQL expression:
// strings, label matchers, ranges, numbers and durations (0.99, 5m), and
// the label lists of by, without, on, ignoring, group_left and
// group_right.
var promqlNoise = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|\b[0-9][0-9a-zA-Z._]*|` +
	`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)

// promqlIdent is a name, and whether a '(' follows it (a function).
var promqlIdent = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)

// promqlWords are PromQL's keywords, which are not metric names.
var promqlWords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"inf": true, "nan": true}

// metricNames returns the metric names expr reads, in order.
func metricNames(expr string) []string {
	var names []string
	for _, m := range promqlIdent.FindAllStringSubmatch(promqlNoise.ReplaceAllString(expr, " "), -1) {
		if m[1] == "" && !promqlWords[strings.ToLower(m[0])] {
			names = append(names, m[0])
		}
	}
	return names
}

// TestMetricNames: the extractor finds the metric names of an expression,
// and only them.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (engine, le) (rate(x_bucket{job=~"$job",a="b}"}[$__rate_interval])))`: {"x_bucket"},
		`count(max by (engine) (a{job=~"$job"}) > 0) / on(job) group_left(engine) b offset 5m`:                 {"a", "b"},
		`sum without (reason) (c) and bool d or e unless Inf`:                                                  {"c", "d", "e"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// registeredNames returns the names package metrics exports: each
// collector's, with a histogram's _bucket, _sum and _count series.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	m := New(nil)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for _, c := range append(m.collectors(), scrapeHook{m: m}, renewalHook{}) {
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		_, histogram := c.(*prometheus.HistogramVec)
		for d := range ch {
			sub := fqName.FindStringSubmatch(d.String())
			if sub == nil {
				t.Fatalf("no name in %s", d)
			}
			names[sub[1]] = true
			if histogram {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[sub[1]+s] = true
				}
			}
		}
	}
	return names
}

// mustChart are metrics the dashboard must have a panel for: the ones its
// issue asked for that are easy to drop by mistake.
var mustChart = []string{"cerberus_leases_held", "cerberus_renewal_slack_seconds",
	"cerberus_acquire_seconds_bucket", "cerberus_switches_total", "cerberus_fleet_processes"}

// TestDashboardQueriesExist: every metric a panel of the Grafana
// dashboard queries is one package metrics registers, and the metrics of
// mustChart each have a panel.
func TestDashboardQueriesExist(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []dashPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	known := registeredNames(t)
	queried := 0
	seen := map[string]bool{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				for _, name := range metricNames(tg.Expr) {
					queried++
					seen[name] = true
					if !known[name] {
						t.Errorf("panel %q queries %s, which package metrics does not register", p.Title, name)
					}
				}
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if queried < 10 {
		t.Fatalf("%s: only %d metric names queried; the dashboard lost its panels", dashboardPath, queried)
	}
	for _, name := range mustChart {
		if !seen[name] {
			t.Errorf("%s: no panel queries %s", dashboardPath, name)
		}
	}
}

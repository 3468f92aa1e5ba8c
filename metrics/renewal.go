package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/failover"
)

// slackDesc is the renewal gauge WatchRenewal reports.
var slackDesc = prometheus.NewDesc("cerberus_renewal_slack_seconds",
	"Room the last renewal round left the lease with the least of it: how long before its validity "+
		"ends its next renewal would land. Negative: at risk of expiring (new grants are refused).",
	[]string{"engine"}, nil)

// WatchRenewal registers with reg a collector that reports, at each
// scrape, cerberus_renewal_slack_seconds{engine} for each of engines that
// renews in rounds (engine.RenewalReporter: Redis and the lease strategy
// of MySQL and PostgreSQL), while it renews some lease. Alert when it
// falls below a fraction of the renewal interval: a lease is lost when
// it goes negative and stays there. Pass the engines given to
// failover.New, or one named engine. It fails, registering nothing, when
// none of them reports its renewal.
func (m *Metrics) WatchRenewal(reg prometheus.Registerer, engines ...failover.NamedEngine) error {
	var h renewalHook
	for _, e := range engines {
		if r := engine.RenewalReporterOf(e.Engine); r != nil {
			h.names = append(h.names, e.Name)
			h.reporters = append(h.reporters, r)
		}
	}
	if len(h.reporters) == 0 {
		return errors.New("metrics: WatchRenewal: none of the engines reports its renewal " +
			"(engine.RenewalReporter: Redis, and MySQL and PostgreSQL with the lease strategy)")
	}
	return reg.Register(h)
}

// renewalHook reads each engine's renewal slack at collection time.
type renewalHook struct {
	names     []string
	reporters []engine.RenewalReporter
}

func (h renewalHook) Describe(ch chan<- *prometheus.Desc) { ch <- slackDesc }

func (h renewalHook) Collect(ch chan<- prometheus.Metric) {
	for i, r := range h.reporters {
		if slack, ok := r.RenewalSlack(); ok {
			ch <- prometheus.MustNewConstMetric(slackDesc, prometheus.GaugeValue, slack.Seconds(), h.names[i])
		}
	}
}

// Package metrics exports cerberus's lock activity to Prometheus. It is a
// package of its own so that services without Prometheus do not build its
// client.
//
//	m := metrics.New(prometheus.DefaultRegisterer)
//	f, _ := failover.New(engines, failover.Options{OnSwitch: m.Switched, OnRelease: m.ForceReleased})
//	m.Watch(prometheus.DefaultRegisterer, f)
//	m.WatchRenewal(prometheus.DefaultRegisterer, engines...) // the renewal slack
//	c, _ := cerberus.New(f, cerberus.WithObserver(m))
//
// Metrics (all prefixed cerberus_):
//
//	acquire_seconds{engine,result}   histogram of acquisition time, waiting included
//	acquisitions_total{engine,mode}  granted leases
//	acquire_failures_total{engine,reason}  not_acquired, context, error
//	leases_held{engine}              leases held now by this process: up at each grant, down once
//	                                 when it ends (Unlock or any loss; cerberus.EndObserver)
//	leases_lost_total{engine,reason}       lease_lost, released_by_operator, engine_switched, closed
//	active_engine{engine}            1 for the active engine (Manager.ActiveEngine: under an engine
//	                                 key the key's engine), 0 for the others; all 0 while unknown
//	engine_healthy{engine}           1 while the manager sees the engine healthy
//	switches_total{from,to,reason}   engine switches
//	force_releases_total{engine}     keys freed by an operator (failover.Options.OnRelease: ForceReleased)
//	renewal_slack_seconds{engine}    room the last renewal round left the tightest lease, for
//	                                 engines that renew in rounds (WatchRenewal)
//	fleet_processes{engine}          live processes of the fleet on each engine (with engine_key)
//	fleet_degraded                   1 while the fleet view has a note: this process outvoted, or
//	                                 the engine key's Consul unreachable (no automatic switch)
package metrics

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/failover"
)

// Metrics is a cerberus.Observer (and EndObserver) that records into Prometheus collectors,
// and the OnSwitch and OnRelease hooks of a failover.Manager.
type Metrics struct {
	acquire  *prometheus.HistogramVec
	granted  *prometheus.CounterVec
	failures *prometheus.CounterVec
	lost     *prometheus.CounterVec
	held     *prometheus.GaugeVec
	active   *prometheus.GaugeVec
	healthy  *prometheus.GaugeVec
	switches *prometheus.CounterVec
	releases *prometheus.CounterVec
}

// Fleet gauges, computed from the manager at each scrape (see Watch).
var (
	membersDesc = prometheus.NewDesc("cerberus_fleet_processes",
		"Live processes of the fleet (engine_key) on each engine, as this process last read them.",
		[]string{"engine"}, nil)
	degradedDesc = prometheus.NewDesc("cerberus_fleet_degraded",
		"1 while this process is outvoted by its fleet or cannot reach the engine key's "+
			"Consul.", nil, nil)
)

var _ cerberus.EndObserver = (*Metrics)(nil)

// New creates the collectors and registers them with reg (nil: not
// registered, for tests that read them directly).
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cerberus_acquire_seconds",
			Help:    "Time from a Lock or TryLock call to its answer, waiting included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}, []string{"engine", "result"}),
		granted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cerberus_acquisitions_total",
			Help: "Leases granted."}, []string{"engine", "mode"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cerberus_acquire_failures_total",
			Help: "Acquisitions that got no lease: not_acquired (held elsewhere), context (wait ended), " +
				"error."}, []string{"engine", "reason"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cerberus_leases_lost_total",
			Help: "Leases that ended without Unlock."}, []string{"engine", "reason"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cerberus_leases_held",
			Help: "Leases held now: granted and not yet ended (Unlock or loss)."}, []string{"engine"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cerberus_active_engine",
			Help: "1 for the active engine (under an engine key, the key's), 0 for the others."}, []string{"engine"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cerberus_engine_healthy",
			Help: "1 while the manager sees the engine healthy."}, []string{"engine"}),
		switches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cerberus_switches_total",
			Help: "Switches of the active engine."}, []string{"from", "to", "reason"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cerberus_force_releases_total",
			Help: "Keys freed by an operator's force release, by engine."}, []string{"engine"}),
	}
	if reg != nil {
		for _, c := range m.collectors() {
			reg.MustRegister(c)
		}
	}
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquire, m.granted, m.failures, m.lost, m.held, m.active, m.healthy,
		m.switches, m.releases}
}

// Acquired records one acquisition; see cerberus.Observer.
func (m *Metrics) Acquired(e cerberus.AcquireEvent) {
	result := "granted"
	switch {
	case e.Err == nil:
		mode := "exclusive"
		if e.Shared {
			mode = "shared"
		}
		m.granted.WithLabelValues(e.Engine, mode).Inc()
		m.held.WithLabelValues(e.Engine).Inc()
	case errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded):
		result = "context"
	case errors.Is(e.Err, cerberus.ErrNotAcquired):
		result = "not_acquired"
	default:
		result = "error"
	}
	if result != "granted" {
		m.failures.WithLabelValues(e.Engine, result).Inc()
	}
	m.acquire.WithLabelValues(e.Engine, result).Observe(e.Duration.Seconds())
}

// Lost records one lost lease; see cerberus.Observer.
func (m *Metrics) Lost(e cerberus.LostEvent) {
	reason := "lease_lost"
	switch {
	case errors.Is(e.Err, cerberus.ErrEngineSwitched):
		reason = "engine_switched"
	case errors.Is(e.Err, cerberus.ErrReleasedByOperator):
		reason = "released_by_operator"
	case errors.Is(e.Err, cerberus.ErrClosed):
		reason = "closed"
	}
	m.lost.WithLabelValues(e.Engine, reason).Inc()
}

// Ended counts a lease down from leases_held; see cerberus.EndObserver.
func (m *Metrics) Ended(e cerberus.EndEvent) {
	m.held.WithLabelValues(e.Engine).Dec()
}

// ForceReleased counts a force release; pass it as
// failover.Options.OnRelease.
func (m *Metrics) ForceReleased(ev failover.ReleaseEvent) {
	m.releases.WithLabelValues(ev.Engine).Inc()
}

// Switched records a switch; pass it as failover.Options.OnSwitch.
func (m *Metrics) Switched(ev failover.SwitchEvent) {
	m.switches.WithLabelValues(ev.From, ev.To, ev.Reason).Inc()
	m.active.WithLabelValues(ev.From).Set(0)
	m.active.WithLabelValues(ev.To).Set(1)
}

// Update sets the active-engine and health gauges from f's status; call it
// when scraping, or use Watch. The active engine is f.ActiveEngine(), the
// one every view shows: under an engine key the key's engine, and no
// engine at all while the key cannot be read.
func (m *Metrics) Update(f *failover.Manager) {
	active := f.ActiveEngine().Name
	for _, s := range f.Status() {
		m.active.WithLabelValues(s.Name).Set(b2f(s.Name == active))
		m.healthy.WithLabelValues(s.Name).Set(b2f(s.Healthy))
	}
}

// Watch registers a collector with reg that calls Update on every scrape,
// so the gauges are never stale, and that reports the fleet gauges
// (fleet_processes, fleet_degraded) from f's fleet view.
func (m *Metrics) Watch(reg prometheus.Registerer, f *failover.Manager) error {
	return reg.Register(scrapeHook{m, f})
}

// scrapeHook refreshes the gauges from the manager at collection time,
// and computes the fleet gauges there.
type scrapeHook struct {
	m *Metrics
	f *failover.Manager
}

func (h scrapeHook) Describe(ch chan<- *prometheus.Desc) {
	ch <- membersDesc
	ch <- degradedDesc
}

func (h scrapeHook) Collect(ch chan<- prometheus.Metric) {
	h.m.Update(h.f)
	fl := h.f.Fleet()
	for engine, n := range fl.ByEngine() {
		ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(n), engine)
	}
	ch <- prometheus.MustNewConstMetric(degradedDesc, prometheus.GaugeValue, b2f(fl.Note != ""))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

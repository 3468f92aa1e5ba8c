package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/engine/postgres"
	"github.com/cerberus-go/cerberus/failover"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestRenewalSlack: cerberus_renewal_slack_seconds appears once an engine
// renews a lease, says how much of the lease's validity its next renewal
// leaves, and goes away when nothing is renewed; on Redis and on
// PostgreSQL's lease strategy. WatchRenewal refuses engines that report
// nothing.
func TestRenewalSlack(t *testing.T) {
	err := New(nil).WatchRenewal(prometheus.NewRegistry(), failover.NamedEngine{Name: "m", Engine: memory.New()})
	if err == nil {
		t.Error("WatchRenewal of the memory engine alone: nil error; want one (it renews nothing in rounds)")
	}
	t.Run("redis", func(t *testing.T) { testRenewalSlack(t, redisEngine(t)) })
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.PostgresDSN(t)
		table := testenv.SQLTable(t, func(ctx context.Context, table string) error {
			e, err := postgres.Open(dsn, postgres.WithTable(table))
			if err != nil {
				return err
			}
			defer func() { _ = e.Close() }()
			return e.Migrate(ctx)
		}, func(table string) { dropPostgres(t, dsn, table) })
		e, err := postgres.Open(dsn, postgres.WithTable(table), postgres.WithStrategy(postgres.StrategyLease))
		if err != nil {
			t.Fatal(err)
		}
		testRenewalSlack(t, e)
	})
}

func testRenewalSlack(t *testing.T, eng engine.Engine) {
	reg := prometheus.NewRegistry()
	m := New(nil)
	if err := m.WatchRenewal(reg, failover.NamedEngine{Name: "x", Engine: eng}); err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(eng)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, ok := slackOf(t, reg); ok {
		t.Fatal("a renewal slack before any lease")
	}
	const period = 2 * time.Second
	l, err := c.Lock(ctx, "renewed", cerberus.WithWatchdog(period))
	if err != nil {
		t.Fatal(err)
	}
	var slack float64
	waitUntil(t, ctx, "a renewal round", func() bool {
		var ok bool
		slack, ok = slackOf(t, reg)
		return ok
	})
	// The next renewal is due a third of the period after this one and
	// its validity ends a tenth short of the period: a round that
	// keeps up leaves room, at most about 0.9 - 1/3 of the period.
	t.Logf("renewal slack %.3fs", slack)
	if slack <= 0 || slack > 0.6*period.Seconds() {
		t.Errorf("renewal slack %vs; want within (0, %vs]", slack, 0.6*period.Seconds())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "the slack to go once nothing is renewed", func() bool {
		_, ok := slackOf(t, reg)
		return !ok
	})
}

// slackOf gathers reg and returns the renewal slack of engine "x".
func slackOf(t *testing.T, reg *prometheus.Registry) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cerberus_renewal_slack_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if labelOf(mt, "engine") == "x" {
				return mt.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func labelOf(mt *dto.Metric, name string) string {
	for _, lp := range mt.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// waitUntil polls cond every 10ms until it holds or ctx ends.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// dropPostgres drops the engine's tables under table.
func dropPostgres(t *testing.T, dsn, table string) {
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Errorf("drop %s: %v", table, err)
		return
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []string{"", "_readers", "_fences", "_sessions", "_queue", "_released"} {
		if _, err := pool.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %q", table+s)); err != nil {
			t.Errorf("drop %s%s: %v", table, s, err)
		}
	}
}

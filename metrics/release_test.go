package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/failover"
)

// TestForceReleaseCountedAndSurfaced: a force release through a
// failover.Manager ends the root Client's lease with
// cerberus.ErrReleasedByOperator, returns its holder with the lease's
// token, is counted in cerberus_force_releases_total and as a loss of
// reason released_by_operator, and is logged with key, engine, token and
// who asked. A key held on no engine, and an unknown engine, change
// nothing.
func TestForceReleaseCountedAndSurfaced(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	var logged bytes.Buffer
	f, err := failover.New([]failover.NamedEngine{{Name: "a", Engine: memory.New()}, {Name: "b", Engine: memory.New()}},
		failover.Options{OnRelease: m.ForceReleased, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(f, cerberus.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReleaseOn(ctx, "b", "k", "ops"); !errors.Is(err, cerberus.ErrNotHeld) {
		t.Errorf("ReleaseOn(b, k) = %v; want ErrNotHeld: k is held on a only", err)
	}
	if _, err := f.ReleaseOn(ctx, "zz", "k", "ops"); !errors.Is(err, failover.ErrUnknownEngine) {
		t.Errorf("ReleaseOn(zz, k) = %v; want ErrUnknownEngine", err)
	}
	hs, err := f.ReleaseOn(ctx, "", "k", "alice@host")
	if err != nil || len(hs) != 1 || hs[0].Token != l.Token() {
		t.Fatalf("ReleaseOn(k) = %+v, %v; want the holder with token %d", hs, err, l.Token())
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease was not told of its force release")
	}
	if !errors.Is(l.Err(), cerberus.ErrReleasedByOperator) || !errors.Is(l.Err(), cerberus.ErrLeaseLost) {
		t.Errorf("lease ended with %v; want ErrReleasedByOperator", l.Err())
	}
	if err := l.Unlock(ctx); !errors.Is(err, cerberus.ErrNotHeld) {
		t.Errorf("Unlock after the force release = %v; want ErrNotHeld", err)
	}
	if n := testutil.ToFloat64(m.releases.WithLabelValues("a")); n != 1 {
		t.Errorf("force_releases_total{engine=a} = %v; want 1", n)
	}
	if n := testutil.ToFloat64(m.lost.WithLabelValues("a", "released_by_operator")); n != 1 {
		t.Errorf("leases_lost_total{a,released_by_operator} = %v; want 1", n)
	}
	for _, want := range []string{"key=k", "engine=a", "by=alice@host", fmt.Sprint(l.Token())} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("the log %q does not say %s", logged.String(), want)
		}
	}
}

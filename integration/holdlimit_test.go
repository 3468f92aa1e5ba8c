package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// The hold-limit run: a watchdog lease renewed every limitPeriod (or the
// engine's shortest period, if longer) is ended at limitHold; its Done
// must close within limitLate after that, and a waiter on another engine
// instance must be granted within limitGrant after Done closed.
const (
	limitPeriod = 300 * time.Millisecond
	limitHold   = 1500 * time.Millisecond
	limitLate   = time.Second
	limitGrant  = 2 * time.Second
)

// TestHoldLimit: the hold limit ends a watchdog lease on time on every
// engine. The holder is told first (Done closes with ErrHoldLimit), then
// its key is released, and a waiter in another client, blocked in Lock,
// is granted it with a higher token.
func TestHoldLimit(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	table := migratedTable(t, dsn)
	pgDSN := testenv.PostgresDSN(t)
	pgTable := migratedPostgresTable(t, pgDSN)
	for _, spec := range []workerSpec{
		{Engine: "redis", Addrs: []string{testenv.RedisAddr(t)}},
		// TTL is the ZooKeeper session timeout (the shared server
		// negotiates at least 4s) and the etcd lease TTL.
		{Engine: "zookeeper", Addrs: []string{testenv.ZooKeeperAddr(t)}, TTL: 4 * time.Second},
		// Consul refuses a lease period below its floor (20s with the
		// shortest session and no lock-delay): the lease is not renewed
		// within the limit there, but the limit ends it all the same.
		{Engine: "consul", Addrs: []string{testenv.ConsulAddr(t)}},
		{Engine: "etcd", Addrs: []string{testenv.EtcdAddr(t)}, TTL: etcdLease},
		{Engine: "mysql", Addrs: []string{dsn}, Table: table},
		{Engine: "mysql-row", Addrs: []string{dsn}, Table: table},
		{Engine: "mysql-session", Addrs: []string{dsn}, Table: table},
		{Engine: "postgres", Addrs: []string{pgDSN}, Table: pgTable},
		{Engine: "postgres-lease", Addrs: []string{pgDSN}, Table: pgTable},
	} {
		t.Run(spec.Engine, func(t *testing.T) {
			t.Parallel()
			holdLimitOn(t, spec)
		})
	}
}

func holdLimitOn(t *testing.T, spec workerSpec) {
	holder, waiter := specClient(t, spec), specClient(t, spec)
	period := max(limitPeriod, holder.Engine().Limits().MinTTL)
	if spec.Engine == "consul" {
		period = max(period, consul.Floor(consulSession, 0))
	}
	t.Logf("%s: lease period %v, hold limit %v", spec.Engine, period, limitHold)
	ctx, key := testContext(t), unique(t, "holdlimit/"+spec.Engine)
	start := time.Now()
	l, err := holder.Lock(ctx, key, cerberus.WithWatchdog(period), cerberus.WithHoldLimit(limitHold))
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		l     *cerberus.Lease
		err   error
		at    time.Time
		early bool // granted while the holder had not been told
	}
	granted := make(chan grant, 1)
	go func() {
		n, err := waiter.Lock(ctx, key)
		g := grant{l: n, err: err, at: time.Now()}
		select {
		case <-l.Done():
		default:
			g.early = true
		}
		granted <- g
	}()
	var ended time.Time
	select {
	case <-l.Done():
		ended = time.Now()
	case <-time.After(limitHold + limitLate):
		t.Fatalf("lease still held %v after the grant, limit %v", time.Since(start), limitHold)
	}
	if held := ended.Sub(start); held < limitHold {
		t.Fatalf("lease ended after %v, before its limit %v: %v", held, limitHold, l.Err())
	}
	if !errors.Is(l.Err(), cerberus.ErrHoldLimit) {
		t.Fatalf("Err = %v, want ErrHoldLimit", l.Err())
	}
	g := <-granted
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	defer func() { _ = g.l.Unlock(context.WithoutCancel(ctx)) }()
	if g.early {
		t.Fatal("the waiter was granted before the holder's Done closed")
	}
	if wait := g.at.Sub(ended); wait > limitGrant {
		t.Fatalf("waiter granted %v after the holder was told, want within %v", wait, limitGrant)
	}
	if g.l.Token() <= l.Token() {
		t.Fatalf("waiter's token %d not above the holder's %d", g.l.Token(), l.Token())
	}
	t.Logf("%s: told after %v, waiter granted %v later, tokens %d -> %d", spec.Engine,
		ended.Sub(start).Round(time.Millisecond), g.at.Sub(ended).Round(time.Millisecond), l.Token(), g.l.Token())
}

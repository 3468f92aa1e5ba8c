package postgres

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// The environment TestForceRelease gives its holder process.
const (
	leaseHolderDSNEnv   = "CERBERUS_POSTGRES_TEST_LEASE_HOLDER_DSN"
	leaseHolderTableEnv = "CERBERUS_POSTGRES_TEST_LEASE_HOLDER_TABLE"
)

// leaseHolderEngine is the engine of a holder process of
// enginetest.RunPausedRelease (see TestMain): the lease strategy, on the
// DSN and table its environment names.
func leaseHolderEngine() (engine.Engine, error) {
	return Open(os.Getenv(leaseHolderDSNEnv), WithTable(os.Getenv(leaseHolderTableEnv)),
		WithStrategy(StrategyLease))
}

// TestForceRelease runs enginetest.RunRelease, then
// enginetest.RunPausedRelease with a holder process, on tables of the
// test's own, with the lease strategy.
func TestForceRelease(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	newEngine := func() (engine.Engine, error) {
		return Open(dsn, WithTable(table), WithStrategy(StrategyLease))
	}
	enginetest.RunRelease(t, newEngine)
	enginetest.RunPausedRelease(t, newEngine, leaseHolderDSNEnv+"="+dsn, leaseHolderTableEnv+"="+table)
}

// TestForceReleaseAfterUpgrade runs enginetest.RunReleaseUpgrade on
// tables of the previous version (without "<table>_released"), which
// Migrate brings up to date.
func TestForceReleaseAfterUpgrade(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	if _, err := rawPool(t, dsn).Exec(hangCtx(t), "DROP TABLE "+quote(table+"_released")); err != nil {
		t.Fatal(err)
	}
	opts := []Option{WithTable(table), WithStrategy(StrategyLease)}
	holder, op := openT(t, dsn, opts...), openT(t, dsn, opts...)
	enginetest.RunReleaseUpgrade(t, holder, op, op.Migrate)
}

// TestLostReleaseIsCleared: a lease-strategy Release that the server does
// not answer (stopped with SIGSTOP past the op timeout) fails with
// ErrUnavailable, and the engine clears the key once the server answers
// again, so that a waiter in another engine is granted it at once rather
// than after the lease's TTL; the key's next holder keeps it.
func TestLostReleaseIsCleared(t *testing.T) {
	srv := testenv.StartPostgres(t)
	table := testTable(t, srv.DSN)
	const ttl = 20 * time.Second
	e := openT(t, srv.DSN, WithTable(table), WithStrategy(StrategyLease), WithOpTimeout(300*time.Millisecond))
	next := openT(t, srv.DSN, WithTable(table), WithStrategy(StrategyLease))
	req := engine.Request{Key: "lostrelease/k", Mode: engine.Exclusive, TTL: ttl, Renew: true, Wait: true}
	l, err := e.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	err = l.Release(context.Background())
	time.Sleep(300 * time.Millisecond)
	srv.Resume()
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Release on a stopped server: %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithTimeout(hangCtx(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	l2, err := next.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("a waiter after the lost release, %v later (the lease's TTL is %v): %v",
			time.Since(start).Round(time.Millisecond), ttl, err)
	}
	time.Sleep(time.Second) // the background clear has long finished
	if err := l2.Err(); err != nil {
		t.Fatalf("the next holder lost the key: %v", err)
	}
	if err := l2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

package postgres

import (
	"os"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
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

package postgres

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// TestForceRelease runs enginetest.RunRelease on tables of the test's own,
// with the lease strategy.
func TestForceRelease(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	enginetest.RunRelease(t, func() (engine.Engine, error) {
		return Open(dsn, WithTable(table), WithStrategy(StrategyLease))
	})
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

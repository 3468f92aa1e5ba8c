package mysql

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// TestForceRelease runs enginetest.RunRelease on a table of the test's
// own, with the lease strategy and with the row strategy.
func TestForceRelease(t *testing.T) {
	dsn := testDSN(t)
	for _, s := range []Strategy{StrategyLease, StrategyRow} {
		t.Run(string(s), func(t *testing.T) {
			table := testTable(t, dsn)
			enginetest.RunRelease(t, func() (engine.Engine, error) {
				return Open(dsn, WithTable(table), WithStrategy(s))
			})
		})
	}
}

// TestForceReleaseAfterUpgrade runs enginetest.RunReleaseUpgrade on
// tables of the previous version (without "<table>_released"), which
// Migrate brings up to date.
func TestForceReleaseAfterUpgrade(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	if _, err := rawDB(t, dsn).Exec("DROP TABLE `" + table + "_released`"); err != nil {
		t.Fatal(err)
	}
	holder, op := openT(t, dsn, WithTable(table)), openT(t, dsn, WithTable(table))
	enginetest.RunReleaseUpgrade(t, holder, op, op.Migrate)
}

package mysql

import (
	"os"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// TestMain runs the package's tests, or, started as a holder process of
// enginetest.RunPausedRelease, holds a key instead (see holderEngine).
func TestMain(m *testing.M) {
	if code, ok := enginetest.Hold(holderEngine); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// The environment TestForceRelease gives its holder process.
const (
	holderDSNEnv      = "CERBERUS_MYSQL_TEST_HOLDER_DSN"
	holderTableEnv    = "CERBERUS_MYSQL_TEST_HOLDER_TABLE"
	holderStrategyEnv = "CERBERUS_MYSQL_TEST_HOLDER_STRATEGY"
)

// holderEngine is the engine of a holder process, on the DSN, table and
// strategy its environment names.
func holderEngine() (engine.Engine, error) {
	return Open(os.Getenv(holderDSNEnv), WithTable(os.Getenv(holderTableEnv)),
		WithStrategy(Strategy(os.Getenv(holderStrategyEnv))))
}

// TestForceRelease runs enginetest.RunRelease, then
// enginetest.RunPausedRelease with a holder process, on a table of the
// test's own, with each strategy.
func TestForceRelease(t *testing.T) {
	dsn := testDSN(t)
	for _, s := range []Strategy{StrategyLease, StrategyRow, StrategySession} {
		t.Run(string(s), func(t *testing.T) {
			table := testTable(t, dsn)
			newEngine := func() (engine.Engine, error) {
				return Open(dsn, WithTable(table), WithStrategy(s))
			}
			enginetest.RunRelease(t, newEngine)
			enginetest.RunPausedRelease(t, newEngine, holderDSNEnv+"="+dsn, holderTableEnv+"="+table,
				holderStrategyEnv+"="+string(s))
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

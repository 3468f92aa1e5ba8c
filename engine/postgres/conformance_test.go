package postgres

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// unreachableDSN points at a loopback port nothing listens on, with a
// password that no error may show.
const unreachableDSN = "postgres://postgres:s3cr3t-unreachable@127.0.0.1:1/test?sslmode=disable"

func TestConformanceSession(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	grantless := newRole(t, dsn)
	enginetest.Run(t, func() (engine.Engine, error) {
		return Open(dsn, WithTable(table))
	}, enginetest.Options{
		Leftovers: heldSession(pool, table),
		Unreachable: func() (engine.Engine, error) {
			return Open(unreachableDSN, WithTable(table))
		},
		// The role logs in, but the grant statement, which takes the
		// advisory lock (no privilege needed) and writes the tables, is
		// refused (42501).
		AccessDenied: func() (engine.Engine, error) {
			return Open(grantless, WithTable(table))
		},
	})
}

func TestConformanceLease(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	// A role that does not exist: the server refuses the login (28000).
	unknown := withUser(t, dsn, "cerberus_no_such_role", "s3cr3t-denied")
	enginetest.Run(t, func() (engine.Engine, error) {
		return Open(dsn, WithTable(table), WithStrategy(StrategyLease))
	}, enginetest.Options{
		Leftovers: heldLease(pool, table),
		Unreachable: func() (engine.Engine, error) {
			return Open(unreachableDSN, WithTable(table), WithStrategy(StrategyLease))
		},
		AccessDenied: func() (engine.Engine, error) {
			return Open(unknown, WithTable(table), WithStrategy(StrategyLease))
		},
	})
}

// TestCloseTellsFirst: a closing engine tells its holders before their
// keys are free, in both strategies.
func TestCloseTellsFirst(t *testing.T) {
	dsn := testDSN(t)
	for _, s := range []Strategy{StrategyLease, StrategySession} {
		t.Run(string(s), func(t *testing.T) {
			table := testTable(t, dsn)
			enginetest.RunCloseTellsFirst(t, func() (engine.Engine, error) {
				return Open(dsn, WithTable(table), WithStrategy(s))
			})
		})
	}
}

// TestReleaseSession: the force-release contract on the session strategy:
// the holders are in other engines, told by their pings' read of the
// revocations.
func TestReleaseSession(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	enginetest.RunRelease(t, func() (engine.Engine, error) {
		return Open(dsn, WithTable(table))
	})
}

package mysql

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// unreachableDSN points at a loopback port nothing listens on.
const unreachableDSN = "root:secret@tcp(127.0.0.1:1)/test"

func TestConformanceLease(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	enginetest.Run(t, func() (engine.Engine, error) {
		return Open(dsn, WithTable(table))
	}, enginetest.Options{
		Leftovers: heldLease(db, table),
		Unreachable: func() (engine.Engine, error) {
			return Open(unreachableDSN, WithTable(table))
		},
	})
}

func TestConformanceRow(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	enginetest.Run(t, func() (engine.Engine, error) {
		return Open(dsn, WithTable(table), WithStrategy(StrategyRow))
	}, enginetest.Options{
		Leftovers: heldRow(db, table),
		Unreachable: func() (engine.Engine, error) {
			return Open(unreachableDSN, WithTable(table), WithStrategy(StrategyRow))
		},
	})
}

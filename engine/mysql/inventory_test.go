package mysql

import (
	"context"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// TestList runs enginetest.RunList on a table of the test's own, with the
// lease, row and session strategies.
func TestList(t *testing.T) {
	dsn := testDSN(t)
	for _, s := range []Strategy{StrategyLease, StrategyRow, StrategySession} {
		t.Run(string(s), func(t *testing.T) {
			table := testTable(t, dsn)
			enginetest.RunList(t, func() (engine.Engine, error) {
				return Open(dsn, WithTable(table), WithStrategy(s))
			})
		})
	}
}

// TestListCutKey: when the row limit cuts a key's readers short, that key
// is left out and More is set, rather than listed with some of its
// holders.
func TestListCutKey(t *testing.T) {
	defer func(n int) { listSlack = n }(listSlack)
	listSlack = 0
	e := openT(t, testDSN(t), WithTable(testTable(t, testDSN(t))))
	ctx := context.Background()
	for _, v := range []string{"r1", "r2", "r3"} {
		l, err := e.Acquire(ctx, engine.Request{Key: "cut/b", Mode: engine.Shared, Renew: true, TTL: time.Minute, Value: v})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	inv, err := e.List(ctx, "cut/", 1) // two rows for three readers
	if err != nil || len(inv.Keys) != 0 || !inv.More {
		t.Errorf("List = %+v, %v; want no keys and More", inv, err)
	}
	if inv, err = e.List(ctx, "cut/", 2); err != nil || len(inv.Keys) != 1 || len(inv.Keys[0].Holders) != 3 || inv.More {
		t.Errorf("List with room for the readers = %+v, %v; want cut/b with its three readers", inv, err)
	}
}

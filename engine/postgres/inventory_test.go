package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// TestList runs enginetest.RunList on tables of the test's own, with the
// lease strategy and with the session strategy.
func TestList(t *testing.T) {
	dsn := testDSN(t)
	for _, s := range []Strategy{StrategyLease, StrategySession} {
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
	dsn := testDSN(t)
	e := openT(t, dsn, WithTable(testTable(t, dsn)))
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

// TestListSkipsTerminatedHolder: with the session strategy, the holder
// row that a terminated backend leaves behind is not listed, while a live
// holder read in the same listing is.
func TestListSkipsTerminatedHolder(t *testing.T) {
	dsn := testDSN(t)
	pool := rawPool(t, dsn)
	e := openT(t, dsn, WithTable(testTable(t, dsn)), WithStrategy(StrategySession))
	dead, err := e.Acquire(hangCtx(t), sessionReq("term/a", time.Second))
	if err != nil {
		t.Fatal(err)
	}
	live, err := e.Acquire(hangCtx(t), sessionReq("term/b", time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release(context.Background())
	if _, err := pool.Exec(hangCtx(t), "SELECT pg_terminate_backend($1)", int(pidOf(t, dead))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dead.Done():
	case <-time.After(hang):
		t.Fatal("Done of the terminated holder did not close")
	}
	inv, err := e.List(hangCtx(t), "term/", 0)
	if err != nil || len(inv.Keys) != 1 || inv.Keys[0].Key != "term/b" || inv.Keys[0].Holders[0].Token != live.Token() {
		t.Errorf("List = %+v, %v; want term/b alone, with token %d", inv, err, live.Token())
	}
}

// TestListSkipsReleasedRecords: with the session strategy an exclusive
// release leaves the key's holder record in place; List must not read
// those records as rows, or a few released keys ahead of a held one in key
// order would fill the rows a listing reads and hide it.
func TestListSkipsReleasedRecords(t *testing.T) {
	defer func(n int) { listSlack = n }(listSlack)
	listSlack = 0
	dsn := testDSN(t)
	e := openT(t, dsn, WithTable(testTable(t, dsn)), WithStrategy(StrategySession))
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		l, err := e.Acquire(hangCtx(t), sessionReq("gone/"+k, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(hangCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := e.Acquire(hangCtx(t), sessionReq("gone/z", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	inv, err := e.List(hangCtx(t), "gone/", 1)
	if err != nil || len(inv.Keys) != 1 || inv.Keys[0].Key != "gone/z" || inv.More {
		t.Errorf("List = %+v, %v; want gone/z alone, no More", inv, err)
	}
}

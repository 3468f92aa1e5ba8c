package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// TestSessionBadInput: on an engine whose server cannot be reached, every
// request the session strategy cannot grant (shared, counted, bad key,
// bad TTL) and every bad ForceRelease or List is refused at once with its
// validation error, which shows that no I/O came first.
func TestSessionBadInput(t *testing.T) {
	e, err := Open(unreachableDSN, WithStrategy(StrategySession))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if lim := e.Limits(); !lim.ExclusiveOnly || lim.Counted {
		t.Errorf("Limits() = %+v; want ExclusiveOnly and not Counted", lim)
	}
	ok := engine.Request{Key: "k", Mode: engine.Exclusive, TTL: time.Second}
	for _, tc := range []struct {
		name string
		edit func(*engine.Request)
		want error
	}{
		{"shared", func(r *engine.Request) { r.Mode = engine.Shared }, engine.ErrInvalidRequest},
		{"shared wait", func(r *engine.Request) { r.Mode, r.Wait = engine.Shared, true }, engine.ErrInvalidRequest},
		{"counted", func(r *engine.Request) { r.Mode, r.Limit = engine.Shared, 3 }, engine.ErrInvalidRequest},
		{"exclusive with a limit", func(r *engine.Request) { r.Limit = 1 }, engine.ErrInvalidRequest},
		{"empty key", func(r *engine.Request) { r.Key = "" }, engine.ErrInvalidKey},
		{"long key", func(r *engine.Request) { r.Key = strings.Repeat("k", MaxKeyLen+1) }, engine.ErrInvalidKey},
		{"bad UTF-8 key", func(r *engine.Request) { r.Key = "\xff" }, engine.ErrInvalidKey},
		{"short TTL", func(r *engine.Request) { r.TTL = time.Microsecond }, engine.ErrInvalidTTL},
		{"long TTL", func(r *engine.Request) { r.TTL = engine.MaxTTL + time.Second }, engine.ErrInvalidTTL},
		{"bad value", func(r *engine.Request) { r.Value = "a\x00b" }, engine.ErrInvalidRequest},
	} {
		req := ok
		tc.edit(&req)
		if err := e.Validate(req); !errors.Is(err, tc.want) {
			t.Errorf("%s: Validate = %v; want %v", tc.name, err, tc.want)
		}
		start := time.Now()
		l, err := e.Acquire(context.Background(), req)
		if l != nil || !errors.Is(err, tc.want) || time.Since(start) > time.Second {
			t.Errorf("%s: Acquire = %v, %v after %v; want %v at once", tc.name, l, err, time.Since(start), tc.want)
		}
	}
	if _, err := e.ForceRelease(context.Background(), ""); !errors.Is(err, engine.ErrInvalidKey) {
		t.Errorf("ForceRelease(\"\") = %v; want ErrInvalidKey", err)
	}
	if _, err := e.List(context.Background(), "", 0); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("List(\"\") = %v; want ErrInvalidRequest", err)
	}
}

// TestSessionLockName: every key, however long or whatever bytes it holds,
// maps to a 57-character ASCII lock name, within MySQL's 64; distinct keys
// and tables give distinct names.
func TestSessionLockName(t *testing.T) {
	keys := []string{"a", "A", "a b", "ключ/🔒", strings.Repeat("x", MaxKeyLen), "'; DROP TABLE t; --", "a%_b"}
	seen := map[string]string{}
	for _, table := range []string{"t1", "t2"} {
		for _, k := range keys {
			n := lockName(table, k)
			if len(n) != 57 || !strings.HasPrefix(n, "cerberus:") || strings.Trim(n[9:], "0123456789abcdef") != "" {
				t.Errorf("lockName(%q, %q) = %q; want cerberus: and 48 hex digits", table, k, n)
			}
			if prev, dup := seen[n]; dup {
				t.Errorf("lockName(%q, %q) = lockName of %s", table, k, prev)
			}
			seen[n] = table + "/" + k
		}
	}
}

// TestSessionOddKeys: keys a lock name could not hold as they are (longer
// than 64 characters, quotes, multi-byte runes, LIKE wildcards) are granted,
// exclude each other's holders only by key, and Holders and List show
// them byte for byte.
func TestSessionOddKeys(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	a := openT(t, dsn, WithTable(table), WithStrategy(StrategySession))
	b := openT(t, dsn, WithTable(table), WithStrategy(StrategySession))
	ctx := context.Background()
	prefix := "odd-" + t.Name() + "/"
	for i, k := range []string{strings.Repeat("x", MaxKeyLen-len(prefix)), "it's \"quoted\"", "ключ/🔒", "a:b;c%_*"} {
		key := prefix + k
		l, err := a.Acquire(ctx, engine.Request{Key: key, TTL: 10 * time.Second, Renew: true, Value: "v"})
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if _, err := b.Acquire(ctx, engine.Request{Key: key, TTL: time.Second}); !errors.Is(err, engine.ErrNotAcquired) {
			t.Errorf("key %d: a second TryLock = %v; want ErrNotAcquired", i, err)
		}
		hs, err := b.Holders(ctx, key)
		if err != nil || len(hs) != 1 || hs[0].Token != l.Token() || hs[0].Value != "v" {
			t.Errorf("key %d: Holders = %+v, %v; want token %d", i, hs, err, l.Token())
		}
		inv, err := b.List(ctx, key, 0)
		if err != nil || len(inv.Keys) != 1 || inv.Keys[0].Key != key {
			t.Errorf("key %d: List = %+v, %v; want the key itself", i, inv, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if hs, err := b.Holders(ctx, key); err != nil || len(hs) != 0 {
			t.Errorf("key %d: Holders after release = %+v, %v; want none", i, hs, err)
		}
	}
}

// TestSessionMigrateConcurrent: Migrate, which now also creates the
// MEMORY names table and the stored procedures, stays idempotent and safe
// from several processes at once, and the session strategy works on its
// result.
func TestSessionMigrateConcurrent(t *testing.T) {
	dsn := testDSN(t)
	table := "cerberus_mig_" + strings.ToLower(strings.ReplaceAll(time.Now().Format("150405.000000"), ".", ""))
	db := rawDB(t, dsn)
	t.Cleanup(func() { dropTables(t, db, table) })
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			e, err := Open(dsn, WithTable(table), WithStrategy(StrategySession))
			if err != nil {
				errs <- err
				return
			}
			defer e.Close()
			errs <- e.Migrate(context.Background())
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
	e := openT(t, dsn, WithTable(table), WithStrategy(StrategySession))
	if err := e.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	l, err := e.Acquire(context.Background(), engine.Request{Key: "k", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"
)

// SQLTable returns a lock table name unique to this test run
// ("cerberus_t_" and ten hex digits) for the SQL engines' tests. It calls
// migrate twice on it (a migration must be idempotent), each bounded by
// 30 seconds, failing the test if either fails, and has drop remove the
// tables when the test ends.
func SQLTable(t testing.TB, migrate func(ctx context.Context, table string) error,
	drop func(table string)) string {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	table := "cerberus_t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrate(ctx, table); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := migrate(ctx, table); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	t.Cleanup(func() { drop(table) })
	return table
}

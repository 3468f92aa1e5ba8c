package mysql

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus/engine"
)

// hang bounds every wait in these tests; it is a liveness bound, not a
// speed target.
const hang = 20 * time.Second

func hangCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	t.Cleanup(cancel)
	return ctx
}

func openT(t *testing.T, dsn string, opts ...Option) *Engine {
	t.Helper()
	e, err := Open(dsn, opts...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestKillHolder kills the row-strategy holder's connection from another
// connection: its Done closes with ErrLeaseLost, the waiter queued in
// InnoDB gets the lock with a larger token, and the killed lease's Release
// is ErrNotHeld.
func TestKillHolder(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	a := openT(t, dsn, WithTable(table), WithStrategy(StrategyRow), WithConnCheck(50*time.Millisecond))
	b := openT(t, dsn, WithTable(table), WithStrategy(StrategyRow))
	key := "kill/" + t.Name()
	req := engine.Request{Key: key, Mode: engine.Exclusive, TTL: 10 * time.Second, Renew: true, Wait: true}
	la, err := a.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatalf("a: %v", err)
	}
	type result struct {
		l   engine.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := b.Acquire(hangCtx(t), req)
		got <- result{l, err}
	}()
	// The waiter must still be waiting: the holder is alive.
	select {
	case r := <-got:
		t.Fatalf("b was granted while a held the row: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	id := la.(*rowLease).rc.id
	if _, err := db.Exec(fmt.Sprintf("KILL %d", id)); err != nil {
		t.Fatalf("KILL %d: %v", id, err)
	}
	select {
	case <-la.Done():
	case <-time.After(hang):
		t.Fatalf("Done of the killed holder did not close")
	}
	if !errors.Is(la.Err(), engine.ErrLeaseLost) {
		t.Errorf("killed holder: Err() = %v, want ErrLeaseLost", la.Err())
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(hang):
		t.Fatalf("the waiter was not granted after the holder was killed")
	}
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.l.Token() <= la.Token() {
		t.Errorf("next holder's token %d is not above the killed holder's %d", r.l.Token(), la.Token())
	}
	if err := la.Release(hangCtx(t)); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("release of the killed lease: want ErrNotHeld, got %v", err)
	}
	if err := r.l.Release(hangCtx(t)); err != nil {
		t.Errorf("release of the next holder: %v", err)
	}
}

// TestExpiryUsesDatabaseClock: the client's clock cannot be moved inside a
// test, so the test moves the other one. The engine's database sessions get
// a clock a day behind (SET timestamp, sent by the driver from the DSN),
// which is what a client whose clock runs a day ahead of the server looks
// like from the server. The row's expires_at must be that session clock
// plus the TTL, to the microsecond: nothing the client's clock says is
// written. A normal session (the real server clock) then judges the row
// expired, and an engine on it takes the key at once.
func TestExpiryUsesDatabaseClock(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	var now int64
	if err := db.QueryRow("SELECT UNIX_TIMESTAMP()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	skewed := now - 24*3600
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["timestamp"] = fmt.Sprint(skewed)
	e := openT(t, cfg.FormatDSN(), WithTable(table))
	key := "clock/" + t.Name()
	const ttl = time.Hour
	l, err := e.Acquire(hangCtx(t), engine.Request{Key: key, TTL: ttl, Renew: false})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	var got, want time.Time
	if err := db.QueryRow("SELECT `expires_at`, FROM_UNIXTIME(?) + INTERVAL ? MICROSECOND FROM `"+table+"` WHERE `lock_key` = ?",
		skewed, ttl.Microseconds(), key).Scan(&got, &want); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(want) {
		t.Errorf("expires_at = %v, want the engine session's NOW(6)+TTL = %v", got, want)
	}
	// By the server's real clock the lease ended 23 hours ago, whatever the
	// client believes: another engine gets the key at once.
	other := openT(t, dsn, WithTable(table))
	l2, err := other.Acquire(hangCtx(t), engine.Request{Key: key, TTL: time.Second, Renew: true})
	if err != nil {
		t.Fatalf("the server's clock says the lease expired, but a TryLock failed: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	// The first lease's release is conditional on the server's clock too:
	// it changes nothing and reports ErrNotHeld.
	if err := l.Release(hangCtx(t)); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("release of the expired lease: want ErrNotHeld, got %v", err)
	}
	if err := l2.Release(hangCtx(t)); err != nil {
		t.Errorf("the new holder lost the key to a stale release: %v", err)
	}
}

// TestServerComputesExpiry: with the engine's sessions on the real server
// clock, expires_at is NOW(6)+TTL on the server within a second, and a
// renewal moves it forward on the server.
func TestServerComputesExpiry(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	e := openT(t, dsn, WithTable(table))
	key := "expiry/" + t.Name()
	const ttl = 3 * time.Second
	l, err := e.Acquire(hangCtx(t), engine.Request{Key: key, TTL: ttl, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(context.Background()) }()
	left := func() time.Duration {
		t.Helper()
		var us int64
		if err := db.QueryRow("SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), `expires_at`) FROM `"+table+"` WHERE `lock_key` = ?", key).Scan(&us); err != nil {
			t.Fatal(err)
		}
		return time.Duration(us) * time.Microsecond
	}
	first := left()
	if first > ttl || first < ttl-time.Second {
		t.Errorf("expires_at is %v from the server's NOW(6), want within a second under %v", first, ttl)
	}
	var expires, renewed time.Time
	q := "SELECT `expires_at` FROM `" + table + "` WHERE `lock_key` = ?"
	if err := db.QueryRow(q, key).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	// The renewal loop runs every TTL/3; poll for its effect, bounded.
	for deadline := time.Now().Add(hang); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := db.QueryRow(q, key).Scan(&renewed); err != nil {
			t.Fatal(err)
		}
		if renewed.After(expires) {
			break
		}
	}
	if !renewed.After(expires) {
		t.Fatalf("expires_at stayed at %v: the lease was not renewed on the server", expires)
	}
	if d := left(); d > ttl || d < ttl-2*time.Second {
		t.Errorf("after renewal expires_at is %v from the server's NOW(6), want about %v", d, ttl)
	}
}

package mysql

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// permit is a counted shared request for one of limit permits of key.
func permit(key string, limit int, value string, ttl time.Duration) engine.Request {
	return engine.Request{Key: key, Mode: engine.Shared, TTL: ttl, Limit: limit, Value: value}
}

func mustAcquire(t *testing.T, e *Engine, req engine.Request) engine.Lease {
	t.Helper()
	l, err := e.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatalf("acquire %+v: %v", req, err)
	}
	return l
}

func mustRefuse(t *testing.T, e *Engine, req engine.Request) {
	t.Helper()
	l, err := e.Acquire(hangCtx(t), req)
	if !errors.Is(err, engine.ErrNotAcquired) {
		if l != nil {
			_ = l.Release(context.Background())
		}
		t.Fatalf("acquire %+v: %v, want ErrNotAcquired", req, err)
	}
}

func mustHolders(t *testing.T, e *Engine, key string, want ...engine.Holder) {
	t.Helper()
	hs, err := e.Holders(hangCtx(t), key)
	if err != nil {
		t.Fatalf("Holders: %v", err)
	}
	if fmt.Sprint(hs) != fmt.Sprint(want) {
		t.Fatalf("Holders = %+v, want %+v", hs, want)
	}
}

func holderOf(l engine.Lease, value string) engine.Holder {
	return engine.Holder{Mode: l.Mode(), Token: l.Token(), Value: value}
}

// TestCountedLease: counted permits exclude a writer and are excluded by
// one, a permit beyond the limit is refused, Holders lists exactly the
// unexpired leases with their values in token order, and an expired
// permit's row, still in the table, counts for nothing.
func TestCountedLease(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	e := openT(t, dsn, WithTable(table))
	if !e.Limits().Counted {
		t.Fatalf("the lease strategy must count")
	}
	key := "counted/" + t.Name()
	w := mustAcquire(t, e, engine.Request{Key: key, Mode: engine.Exclusive, TTL: time.Minute, Value: "writer"})
	mustHolders(t, e, key, holderOf(w, "writer"))
	mustRefuse(t, e, permit(key, 2, "p", time.Minute))
	if err := w.Release(hangCtx(t)); err != nil {
		t.Fatalf("release: %v", err)
	}
	mustHolders(t, e, key)

	a := mustAcquire(t, e, permit(key, 2, "a", time.Minute))
	b := mustAcquire(t, e, permit(key, 2, "b", time.Minute))
	if !(w.Token() < a.Token() && a.Token() < b.Token()) {
		t.Errorf("tokens %d, %d, %d do not increase", w.Token(), a.Token(), b.Token())
	}
	mustRefuse(t, e, permit(key, 2, "c", time.Minute))
	mustRefuse(t, e, engine.Request{Key: key, Mode: engine.Exclusive, TTL: time.Minute})
	mustHolders(t, e, key, holderOf(a, "a"), holderOf(b, "b"))
	if err := a.Release(hangCtx(t)); err != nil {
		t.Fatalf("release: %v", err)
	}
	c := mustAcquire(t, e, permit(key, 2, "", time.Minute))
	mustHolders(t, e, key, holderOf(b, "b"), holderOf(c, ""))
	for _, l := range []engine.Lease{b, c} {
		if err := l.Release(hangCtx(t)); err != nil {
			t.Fatalf("release: %v", err)
		}
	}

	// Two short permits run out on the server; their rows stay until the
	// next grant tidies them, and neither they nor Holders count them.
	short := 300 * time.Millisecond
	x := mustAcquire(t, e, permit(key, 2, "x", short))
	mustAcquire(t, e, permit(key, 2, "y", short))
	select {
	case <-x.Done():
	case <-time.After(hang):
		t.Fatalf("the short permit did not end")
	}
	time.Sleep(short)
	var rows int
	if err := db.QueryRow("SELECT COUNT(*) FROM `"+table+"_readers` WHERE `lock_key` = ?", key).Scan(&rows); err != nil {
		t.Fatalf("count: %v", err)
	}
	if rows != 2 {
		t.Fatalf("%d reader rows, want the 2 expired ones still there", rows)
	}
	mustHolders(t, e, key)
	z := mustAcquire(t, e, permit(key, 2, "z", time.Minute))
	mustHolders(t, e, key, holderOf(z, "z"))
	_ = z.Release(hangCtx(t))

	if _, err := e.Holders(hangCtx(t), ""); !errors.Is(err, engine.ErrInvalidKey) {
		t.Errorf("Holders of an empty key: %v, want ErrInvalidKey", err)
	}
	_ = e.Close()
	if _, err := e.Holders(hangCtx(t), key); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Holders after Close: %v, want ErrClosed", err)
	}
}

// TestCountedRace: engines race for the permits of fresh keys with
// TryLocks at once, nobody releasing; exactly Limit win each key.
func TestCountedRace(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	const engines, limit, keys = 6, 2, 15
	es := make([]*Engine, engines)
	for i := range es {
		es[i] = openT(t, dsn, WithTable(table))
	}
	for k := range keys {
		key := fmt.Sprintf("race/%s/%d", t.Name(), k)
		// The key's row exists before the race, as it does for every key
		// used before; a first use may refuse a racer spuriously.
		l := mustAcquire(t, es[0], permit(key, limit, "", time.Minute))
		_ = l.Release(hangCtx(t))
		var (
			mu  sync.Mutex
			won []engine.Lease
			wg  sync.WaitGroup
		)
		start := make(chan struct{})
		for _, e := range es {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					l, err := e.Acquire(hangCtx(t), permit(key, limit, "", time.Minute))
					if err != nil {
						if !errors.Is(err, engine.ErrNotAcquired) {
							t.Errorf("acquire: %v", err)
						}
						return
					}
					mu.Lock()
					won = append(won, l)
					mu.Unlock()
				}()
			}
		}
		close(start)
		wg.Wait()
		if len(won) != limit {
			t.Errorf("key %d: %d of %d racers got a permit of %d", k, len(won), 2*engines, limit)
		}
		for _, l := range won {
			_ = l.Release(hangCtx(t))
		}
	}
}

// TestCountedWait: a counted waiter is granted when a permit comes free,
// and a cancelled one leaves no reader row behind.
func TestCountedWait(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	a := openT(t, dsn, WithTable(table))
	b := openT(t, dsn, WithTable(table))
	key := "wait/" + t.Name()
	held := mustAcquire(t, a, permit(key, 1, "a", time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	req := permit(key, 1, "b", time.Minute)
	req.Wait = true
	if l, err := b.Acquire(ctx, req); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("a waiter for a taken permit: %v %v, want ErrNotAcquired", l, err)
	}
	cancel()
	var rows int
	if err := db.QueryRow("SELECT COUNT(*) FROM `"+table+"_readers` WHERE `lock_key` = ?", key).Scan(&rows); err != nil {
		t.Fatalf("count: %v", err)
	}
	if rows != 1 {
		t.Errorf("%d reader rows after a cancelled wait, want the holder's alone", rows)
	}
	got := make(chan error, 1)
	go func() {
		l, err := b.Acquire(hangCtx(t), req)
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("granted while the only permit was held: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := held.Release(hangCtx(t)); err != nil {
		t.Fatalf("release: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(hang):
		t.Fatalf("the waiter was not granted the freed permit")
	}
}

// TestRowHolders: the row strategy lists its holders, read uncommitted,
// until they release or their session ends; it does not count.
func TestRowHolders(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	e := openT(t, dsn, WithTable(table), WithStrategy(StrategyRow), WithConnCheck(50*time.Millisecond))
	if e.Limits().Counted {
		t.Fatalf("the row strategy must not claim to count")
	}
	key := "row/" + t.Name()
	mustHolders(t, e, key)
	w := mustAcquire(t, e, engine.Request{Key: key, Mode: engine.Exclusive, TTL: time.Minute, Renew: true, Value: "w"})
	mustHolders(t, e, key, holderOf(w, "w"))
	if err := w.Release(hangCtx(t)); err != nil {
		t.Fatalf("release: %v", err)
	}
	mustHolders(t, e, key)
	r1 := mustAcquire(t, e, engine.Request{Key: key, Mode: engine.Shared, TTL: time.Minute, Renew: true, Value: "r1"})
	r2 := mustAcquire(t, e, engine.Request{Key: key, Mode: engine.Shared, TTL: time.Minute, Renew: true})
	mustHolders(t, e, key, holderOf(r1, "r1"), holderOf(r2, ""))
	id := r1.(*rowLease).rc.id
	if _, err := db.Exec(fmt.Sprintf("KILL %d", id)); err != nil {
		t.Fatalf("KILL %d: %v", id, err)
	}
	deadline := time.Now().Add(hang)
	for {
		hs, err := e.Holders(hangCtx(t), key)
		if err == nil && fmt.Sprint(hs) == fmt.Sprint([]engine.Holder{holderOf(r2, "")}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Holders after the first reader's session was killed: %+v, %v", hs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = r2.Release(hangCtx(t))
	mustHolders(t, e, key)
	if _, err := e.Acquire(hangCtx(t), permit(key, 2, "", time.Minute)); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("a counted request on the row strategy: %v, want ErrInvalidRequest", err)
	}
}

// TestMigrateOldTables: Migrate adds the value column to tables made by the
// previous version, keeps their rows (and so their versions), and can run
// again.
func TestMigrateOldTables(t *testing.T) {
	dsn := testDSN(t)
	db := rawDB(t, dsn)
	var b [5]byte
	_, _ = rand.Read(b[:])
	table := "cerberus_o_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		for _, s := range []string{"", "_readers", "_fences", "_queue", "_released"} {
			if _, err := db.Exec("DROP TABLE IF EXISTS `" + table + s + "`"); err != nil {
				t.Errorf("drop %s%s: %v", table, s, err)
			}
		}
	})
	// The previous version's schema.
	for _, q := range []string{
		"CREATE TABLE `" + table + "` (`lock_key` VARBINARY(512) NOT NULL, `owner` VARBINARY(64) NULL, " +
			"`mode` TINYINT UNSIGNED NOT NULL DEFAULT 0, `version` BIGINT UNSIGNED NOT NULL DEFAULT 0, " +
			"`ttl_us` BIGINT UNSIGNED NOT NULL DEFAULT 0, `expires_at` DATETIME(6) NULL, " +
			"PRIMARY KEY (`lock_key`)) ENGINE=InnoDB",
		"CREATE TABLE `" + table + "_readers` (`lock_key` VARBINARY(512) NOT NULL, `owner` VARBINARY(64) NOT NULL, " +
			"`version` BIGINT UNSIGNED NOT NULL, `ttl_us` BIGINT UNSIGNED NOT NULL, " +
			"`expires_at` DATETIME(6) NOT NULL, PRIMARY KEY (`lock_key`, `owner`)) ENGINE=InnoDB",
		"CREATE TABLE `" + table + "_fences` (`lock_key` VARBINARY(512) NOT NULL, " +
			"`fence` BIGINT UNSIGNED NOT NULL, PRIMARY KEY (`lock_key`)) ENGINE=InnoDB",
		"INSERT INTO `" + table + "` (`lock_key`, `version`) VALUES ('old', 41)",
		"INSERT INTO `" + table + "_readers` VALUES ('old', 'gone', 40, 1000, NOW(6) - INTERVAL 1 SECOND)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	e := openT(t, dsn, WithTable(table))
	if _, err := e.Acquire(hangCtx(t), permit("old", 2, "", time.Minute)); err == nil {
		t.Fatalf("a grant on tables without the value column succeeded before Migrate")
	}
	for range 2 {
		if err := e.Migrate(hangCtx(t)); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	l := mustAcquire(t, e, permit("old", 2, "v", time.Minute))
	if l.Token() != 42 {
		t.Errorf("token %d after migration, want 42 (the old row's version kept)", l.Token())
	}
	mustHolders(t, e, "old", holderOf(l, "v"))
	_ = l.Release(hangCtx(t))
	x := mustAcquire(t, e, engine.Request{Key: "old", Mode: engine.Exclusive, TTL: time.Minute, Value: "x"})
	mustHolders(t, e, "old", holderOf(x, "x"))
	_ = x.Release(hangCtx(t))
}

package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/mysql/fence"
)

func gormDB(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	gdb, err := gorm.Open(gmysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("gorm.Open: %v", err)
	}
	sqlDB, err := gdb.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	return gdb
}

// TestBadOptions: a bad table name or an unknown strategy is refused by
// Open and New before any I/O (the DSN points at nothing).
func TestBadOptions(t *testing.T) {
	for _, opts := range [][]Option{
		{WithStrategy("pessimistic")},
		{WithStrategy("")},
		{WithTable("")},
		{WithTable("locks; DROP TABLE users")},
		{WithTable("a`b")},
		{WithTable(strings.Repeat("t", maxTableLen+1))},
		{WithBackoff(0, time.Second)},
	} {
		if _, err := Open(unreachableDSN, opts...); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("Open with %d bad options: want ErrInvalidRequest, got %v", len(opts), err)
		}
		if _, err := New(&gorm.DB{}, opts...); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("New with bad options: want ErrInvalidRequest, got %v", err)
		}
	}
	if _, err := Open(unreachableDSN, WithTable(strings.Repeat("t", maxTableLen)), WithStrategy(StrategyRow)); err != nil {
		t.Errorf("longest table name: %v", err)
	}
}

// TestErrorsHideDSN: a server failure is an *engine.OpError wrapping
// ErrUnavailable, and nothing of the DSN's password shows.
func TestErrorsHideDSN(t *testing.T) {
	for _, s := range []Strategy{StrategyLease, StrategyRow, StrategySession} {
		e, err := Open(unreachableDSN, WithStrategy(s))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		_, err = e.Acquire(ctx, engine.Request{Key: "k", TTL: time.Second})
		perr := e.Ping(ctx)
		cancel()
		_ = e.Close()
		for _, err := range []error{err, perr} {
			var oe *engine.OpError
			if !errors.As(err, &oe) || oe.Engine != "mysql" || !errors.Is(err, engine.ErrUnavailable) {
				t.Errorf("%s: want *engine.OpError wrapping ErrUnavailable, got %T %v", s, err, err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: error shows the password: %v", s, err)
			}
		}
	}
	if _, err := Open("root:secret@tcp(127.0.0.1:1"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("bad DSN: want an error without the password, got %v", err)
	}
}

// TestKeysAreBytes: keys that differ only in case, or in trailing spaces,
// are different locks (a *_ci collation or PAD SPACE would merge them).
func TestKeysAreBytes(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	for _, s := range []Strategy{StrategyLease, StrategyRow} {
		e := openT(t, dsn, WithTable(table), WithStrategy(s))
		for _, pair := range [][2]string{{"case/A", "case/a"}, {"pad/x", "pad/x "}, {"uml/ä", "uml/a"}} {
			req := engine.Request{Key: string(s) + pair[0], TTL: 10 * time.Second, Renew: true}
			l1, err := e.Acquire(hangCtx(t), req)
			if err != nil {
				t.Fatalf("%s %q: %v", s, pair[0], err)
			}
			req.Key = string(s) + pair[1]
			l2, err := e.Acquire(hangCtx(t), req)
			if err != nil {
				t.Errorf("%s: %q is held, so %q was refused: %v", s, pair[0], pair[1], err)
			} else {
				_ = l2.Release(hangCtx(t))
			}
			_ = l1.Release(hangCtx(t))
		}
	}
}

// TestNewKeepsCallersDB: an engine on a caller's *gorm.DB works, Close
// leaves that DB open, and no connection goes back to the caller's pool with
// the session settings the row strategy changes.
func TestNewKeepsCallersDB(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	gdb := gormDB(t, dsn)
	sqlDB, err := gdb.DB()
	if err != nil {
		t.Fatal(err)
	}
	const pool = 4
	sqlDB.SetMaxOpenConns(pool)
	sqlDB.SetMaxIdleConns(pool)
	for _, s := range []Strategy{StrategyLease, StrategyRow} {
		e, err := New(gdb, WithTable(table), WithStrategy(s))
		if err != nil {
			t.Fatal(err)
		}
		l, err := e.Acquire(hangCtx(t), engine.Request{Key: "new/" + string(s), TTL: 10 * time.Second, Renew: true})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(l.Err(), engine.ErrClosed) {
			t.Errorf("%s: lease after Close: %v, want ErrClosed", s, l.Err())
		}
		var one int
		if err := gdb.Raw("SELECT 1").Scan(&one).Error; err != nil || one != 1 {
			t.Fatalf("%s: the caller's DB after Close: %v", s, err)
		}
	}
	// A waiting row Acquire with a deadline and a TryLock change the
	// session's lock wait timeout; check every pooled connection.
	e, err := New(gdb, WithTable(table), WithStrategy(StrategyRow))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	l, err := e.Acquire(ctx, engine.Request{Key: "new/pool", TTL: time.Second, Renew: true, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Acquire(ctx, engine.Request{Key: "new/pool", Mode: engine.Shared, TTL: time.Second}); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("shared TryLock on a held key: %v", err)
	}
	_ = l.Release(ctx)
	_ = e.Close()
	conns := make([]interface{ Close() error }, 0, pool)
	for range pool {
		c, err := sqlDB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var same bool
		if err := c.QueryRowContext(ctx, "SELECT @@session.innodb_lock_wait_timeout = @@global.innodb_lock_wait_timeout").Scan(&same); err != nil {
			t.Fatal(err)
		}
		if !same {
			t.Errorf("a pooled connection kept the engine's innodb_lock_wait_timeout")
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

// stock is the fenced resource of TestFencedUpdate.
type stock struct {
	ID    int64 `gorm:"primaryKey"`
	N     int64
	Fence uint64 `gorm:"type:bigint unsigned;not null;default:0"`
}

// TestFence: a holder whose lease expired and whose key went to
// someone else cannot overwrite the new holder's write; the new holder's
// write goes through.
func TestFence(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	gdb := gormDB(t, dsn)
	stockTable := table + "_stock"
	if err := gdb.Table(stockTable).AutoMigrate(&stock{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gdb.Migrator().DropTable(stockTable) })
	// Each strategy fences its own row: the two strategies keep separate
	// token sequences and must not share a lock table (see the package
	// documentation).
	if err := gdb.Table(stockTable).Create([]stock{{ID: 1, N: 10}, {ID: 2, N: 10}}).Error; err != nil {
		t.Fatal(err)
	}
	for i, s := range []Strategy{StrategyLease, StrategyRow} {
		id := i + 1
		a := openT(t, dsn, WithTable(table), WithStrategy(s))
		b := openT(t, dsn, WithTable(table), WithStrategy(s))
		key := "fence/" + string(s)
		old, err := a.Acquire(hangCtx(t), engine.Request{Key: key, TTL: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		<-old.Done() // the fixed lease runs out
		next, err := b.Acquire(hangCtx(t), engine.Request{Key: key, TTL: 10 * time.Second, Renew: true, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		row := func() *gorm.DB { return gdb.Table(stockTable).Where("id = ?", id) }
		if n, err := fence.Update(row(), "fence", next.Token(), map[string]any{"n": gorm.Expr("n - 1")}); err != nil || n != 1 {
			t.Fatalf("%s: the holder's fenced write: n=%d, %v", s, n, err)
		}
		if _, err := fence.Update(row(), "fence", old.Token(), map[string]any{"n": 0}); !errors.Is(err, fence.ErrStale) {
			t.Errorf("%s: stale fenced write: want fence.ErrStale, got %v", s, err)
		}
		if _, err := fence.Update(row(), "fence", next.Token(), map[string]any{"n": 0}); !errors.Is(err, fence.ErrStale) {
			t.Errorf("%s: a second write with the same token: want fence.ErrStale, got %v", s, err)
		}
		var got stock
		if err := row().Take(&got).Error; err != nil {
			t.Fatal(err)
		}
		if got.Fence != next.Token() {
			t.Errorf("%s: fence = %d, want %d", s, got.Fence, next.Token())
		}
		if got.N != 9 {
			t.Errorf("%s: n = %d, want 9: only the current holder's write may land", s, got.N)
		}
		if err := next.Release(hangCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fence.Update(gdb.Table(stockTable), "fence`; --", 1, nil); err == nil {
		t.Errorf("a bad fence column name was accepted")
	}
}

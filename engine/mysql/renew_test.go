package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus/engine"
)

// recorder is a driver.Connector around the real MySQL connector that
// records the argument count of every renewal UPDATE the engine sends.
type recorder struct {
	driver.Connector
	mu     sync.Mutex
	renews []int
	grants int // exclusive grant attempts
}

func (r *recorder) grantCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.grants
}

func (r *recorder) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := r.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &recConn{Conn: c, r: r}, nil
}

func (r *recorder) batches() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.renews...)
}

// recConn passes everything to the real connection.
type recConn struct {
	driver.Conn
	r *recorder
}

func (c *recConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if strings.Contains(q, "INTERVAL `ttl_us` MICROSECOND") {
		c.r.mu.Lock()
		c.r.renews = append(c.r.renews, len(args))
		c.r.mu.Unlock()
	}
	if strings.Contains(q, "`mode` = 0") && strings.Contains(q, "LAST_INSERT_ID(`version` + 1)") {
		c.r.mu.Lock()
		c.r.grants++
		c.r.mu.Unlock()
	}
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *recConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *recConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *recConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *recConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *recConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

// recordingEngine returns an engine on a fresh table whose statements pass
// through a recorder, with the DSN and table for other engines to share.
func recordingEngine(t *testing.T) (*Engine, *recorder, string, string) {
	t.Helper()
	dsn := testDSN(t)
	table := testTable(t, dsn)
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.InterpolateParams = true
	conn, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Connector: conn}
	db := sql.OpenDB(rec)
	t.Cleanup(func() { _ = db.Close() })
	e, err := New(sqlPool{db}, WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, rec, dsn, table
}

// sqlPool is a Pool over a plain *sql.DB.
type sqlPool struct{ db *sql.DB }

func (p sqlPool) DB() (*sql.DB, error) { return p.db, nil }

// TestRenewalIsBatched: one engine holds many renewed leases with a short
// TTL. They outlive several TTLs, and every renewal statement names all of
// them at once: one statement per interval, not one per lease.
func TestRenewalIsBatched(t *testing.T) {
	e, rec, dsn, table := recordingEngine(t)
	const n, ttl = 20, 300 * time.Millisecond
	leases := make([]engine.Lease, n)
	for i := range leases {
		l, err := e.Acquire(hangCtx(t), engine.Request{Key: fmt.Sprintf("renew/%d", i), TTL: ttl, Renew: true})
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	// Rounds that started while the leases were still being acquired (a
	// slow, loaded machine) name fewer, and so may the one in flight now:
	// only later rounds must name all of them.
	before := len(rec.batches()) + 1
	// Wait for at least four renewal rounds (bounded by the hang limit).
	for deadline := time.Now().Add(hang); len(rec.batches()) < before+4 && time.Now().Before(deadline); {
		select {
		case <-leases[0].Done():
			t.Fatalf("a renewed lease ended: %v", leases[0].Err())
		case <-time.After(ttl / 3):
		}
	}
	got := rec.batches()
	if len(got) < before+4 {
		t.Fatalf("only %d renewal statements in %v", len(got), hang)
	}
	got = got[before:]
	for i, args := range got {
		if args != 2*n {
			t.Errorf("renewal statement %d named %d leases, want all %d", i, args/2, n)
		}
	}
	other := openT(t, dsn, WithTable(table))
	for _, l := range leases {
		if l.Err() != nil {
			t.Errorf("%q: %v", l.Key(), l.Err())
		}
		if _, err := other.Acquire(hangCtx(t), engine.Request{Key: l.Key(), TTL: ttl}); err == nil {
			t.Errorf("%q is free after %d renewals", l.Key(), len(got))
		}
		if err := l.Release(hangCtx(t)); err != nil {
			t.Errorf("release %q: %v", l.Key(), err)
		}
	}
}

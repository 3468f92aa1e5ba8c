package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestMain fails the package's tests if any goroutine outlives them, and
// runs a holder process (see runHolder) when a test starts the test binary
// as one.
func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(runHolder())
	}
	if code, ok := enginetest.Hold(leaseHolderEngine); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// hang bounds every wait in these tests; it is a liveness bound, not a
// speed target.
const hang = 20 * time.Second

func hangCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), hang)
	t.Cleanup(cancel)
	return ctx
}

// testDSN is the test server's DSN.
func testDSN(t *testing.T) string {
	t.Helper()
	return testenv.PostgresDSN(t)
}

// testTable returns a table name unique to this test, creates the
// engine's tables under it (twice: Migrate is idempotent), and drops them
// when the test ends.
func testTable(t *testing.T, dsn string) string {
	t.Helper()
	migrate := func(ctx context.Context, table string) error {
		e, err := Open(dsn, WithTable(table))
		if err != nil {
			return fmt.Errorf("open: %w", err)
		}
		defer func() { _ = e.Close() }()
		return e.Migrate(ctx)
	}
	return testenv.SQLTable(t, migrate, func(table string) {
		pool := rawPool(t, dsn)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, s := range []string{"", "_readers", "_fences", "_sessions", "_held", "_revoked", "_queue", "_released"} {
			if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+quote(table+s)); err != nil {
				t.Errorf("drop %s%s: %v", table, s, err)
			}
		}
	})
}

// rawPool is a plain pgx pool on dsn for the tests' own statements, closed
// when the test ends.
func rawPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
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

// advisoryLocks lists the advisory locks on h in the current database,
// granted or waited for, as "pid mode granted".
func advisoryLocks(ctx context.Context, pool *pgxpool.Pool, h int64) ([]string, error) {
	classid, objid := lockParts(h)
	rows, err := pool.Query(ctx, "SELECT pid, mode, granted FROM pg_locks WHERE locktype = 'advisory' "+
		"AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "+
		"AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1", classid, objid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			pid     int
			mode    string
			granted bool
		)
		if err := rows.Scan(&pid, &mode, &granted); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("advisory %s by pid %d (granted %v)", mode, pid, granted))
	}
	return out, rows.Err()
}

// heldSession lists what the session strategy keeps for key: advisory
// locks on its hash, held or waited for by any backend, and holder rows
// (counting or stale).
func heldSession(pool *pgxpool.Pool, table string) func(ctx context.Context, key string) ([]string, error) {
	return func(ctx context.Context, key string) ([]string, error) {
		left, err := advisoryLocks(ctx, pool, keyHash(table, key))
		if err != nil {
			return nil, err
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+quote(table+"_held")+" WHERE lock_key = $1",
			key).Scan(&n); err != nil {
			return nil, err
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("%d holder rows", n))
		}
		return left, nil
	}
}

// heldLease lists what the lease strategy still holds for key: a row with
// an unexpired owner, unexpired reader rows, or unexpired waiters' tickets.
// Cleared rows stay by design (they keep the version) and are not
// leftovers.
func heldLease(pool *pgxpool.Pool, table string) func(ctx context.Context, key string) ([]string, error) {
	return func(ctx context.Context, key string) ([]string, error) {
		var left []string
		var owners, readers, tickets int
		if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+quote(table)+" WHERE lock_key = $1 "+
			"AND owner IS NOT NULL AND expires_at > now()), (SELECT count(*) FROM "+quote(table+"_readers")+
			" WHERE lock_key = $1 AND expires_at > now()), (SELECT count(*) FROM "+quote(table+"_queue")+
			" WHERE lock_key = $1 AND expires_at > now())", key).Scan(&owners, &readers, &tickets); err != nil {
			return nil, err
		}
		if tickets > 0 {
			left = append(left, fmt.Sprintf("%d unexpired tickets", tickets))
		}
		if owners > 0 {
			left = append(left, "row held by an owner")
		}
		if readers > 0 {
			left = append(left, fmt.Sprintf("%d unexpired readers", readers))
		}
		return left, nil
	}
}

// newRole creates a login role (trust authentication lets it in) with no
// privileges on anything the engine uses, dropped when the test ends, and
// returns dsn with its user replaced by it.
func newRole(t *testing.T, dsn string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := "cerberus_ng_" + hex.EncodeToString(b[:])
	pool := rawPool(t, dsn)
	if _, err := pool.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Its sessions may linger in the pools of closed engines' closing
		// connections for a moment; end them first.
		_, _ = pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		if _, err := pool.Exec(ctx, "DROP ROLE IF EXISTS "+role); err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})
	return withUser(t, dsn, role, "")
}

// withUser returns dsn with its user and password replaced.
func withUser(t *testing.T, dsn, user, password string) string {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("dsn: %v", err)
	}
	cc := pc.ConnConfig
	u := "postgres://" + user
	if password != "" {
		u += ":" + password
	}
	return fmt.Sprintf("%s@%s:%d/%s?sslmode=disable", u, cc.Host, cc.Port, cc.Database)
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cerberus-go/cerberus/engine"
)

// TestBadOptions: a bad table name, an unknown strategy or a bad setting
// is refused by Open and New before any I/O (the DSN points at nothing),
// and so is a DSN that cannot be parsed, without showing its password.
func TestBadOptions(t *testing.T) {
	for _, opts := range [][]Option{
		{WithStrategy("advisory")},
		{WithStrategy("")},
		{WithTable("")},
		{WithTable("locks; DROP TABLE users")},
		{WithTable(`a"b`)},
		{WithTable("1locks")},
		{WithTable(strings.Repeat("t", maxTableLen+1))},
		{WithBackoff(0, time.Second)},
		{WithOpTimeout(0)},
	} {
		if _, err := Open(unreachableDSN, opts...); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("Open with bad options: want ErrInvalidRequest, got %v", err)
		}
		if _, err := New(nil, opts...); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("New with bad options: want ErrInvalidRequest, got %v", err)
		}
	}
	for _, opts := range [][]Option{
		{WithMaxConns(1)},
		{WithMaxConns(3)}, // the 2 session conns, plus 2
		{WithSessionConns(0)},
		{WithSessionConns(5), WithMaxConns(6)},
	} {
		if _, err := Open(unreachableDSN, opts...); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("Open with too few connections: want ErrInvalidRequest, got %v", err)
		}
	}
	if _, err := New(nil); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("New(nil): want ErrInvalidRequest, got %v", err)
	}
	for _, dsn := range []string{
		"postgres://u:s3cr3t-bad@127.0.0.1:notaport/test",
		"postgres://u:s3cr3t-bad@[::1/test",
		"host=127.0.0.1 password=s3cr3t-bad sslmode=bogus",
	} {
		_, err := Open(dsn)
		if !errors.Is(err, engine.ErrInvalidRequest) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("bad DSN: want ErrInvalidRequest without the password, got %v", err)
		}
	}
	e, err := Open(unreachableDSN, WithTable(strings.Repeat("t", maxTableLen)), WithStrategy(StrategyLease))
	if err != nil {
		t.Fatalf("longest table name: %v", err)
	}
	defer e.Close()
	if e.Name() != "postgres" || e.Strategy() != StrategyLease || e.Table() != strings.Repeat("t", maxTableLen) {
		t.Errorf("Name, Strategy, Table = %q, %q, %q", e.Name(), e.Strategy(), e.Table())
	}
}

// TestValidate: the session strategy does not count, so a Limit is
// refused before any I/O; the lease strategy accepts it. Both have no
// Floor.
func TestValidate(t *testing.T) {
	s, err := Open(unreachableDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := Open(unreachableDSN, WithStrategy(StrategyLease))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if s.Strategy() != StrategySession {
		t.Errorf("default strategy %q, want %q", s.Strategy(), StrategySession)
	}
	req := engine.Request{Key: "k", Mode: engine.Shared, TTL: time.Second, Limit: 3}
	if err := s.Validate(req); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("session Validate of a counted request: %v, want ErrInvalidRequest", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if _, err := s.Acquire(ctx, req); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("session Acquire of a counted request: %v, want ErrInvalidRequest before any I/O", err)
	}
	if err := l.Validate(req); err != nil {
		t.Errorf("lease Validate of a counted request: %v", err)
	}
	for _, e := range []*Engine{s, l} {
		if lim := e.Limits(); lim.Floor != 0 || lim.MaxKeyLen != MaxKeyLen || lim.Counted != (e == l) {
			t.Errorf("%s Limits = %+v", e.Strategy(), lim)
		}
	}
}

// TestErrorsHidePassword: failures of engines whose DSN holds a password,
// against a port where nothing listens and against the server refusing
// the role, are *engine.OpError values wrapping ErrUnavailable and
// ErrAccessDenied, and none shows the password.
func TestErrorsHidePassword(t *testing.T) {
	dsn := testDSN(t)
	const pw = "s3cr3t-denied"
	denied := withUser(t, dsn, "cerberus_no_such_role", pw)
	for _, s := range []Strategy{StrategySession, StrategyLease} {
		for _, tc := range []struct {
			dsn, secret string
			want        error
		}{{unreachableDSN, "s3cr3t-unreachable", engine.ErrUnavailable}, {denied, pw, engine.ErrAccessDenied}} {
			e, err := Open(tc.dsn, WithStrategy(s), WithTable("cerberus_sec"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			_, aerr := e.Acquire(ctx, engine.Request{Key: "k", TTL: time.Second, Wait: true})
			perr := e.Ping(ctx)
			merr := e.Migrate(ctx)
			_, herr := e.Holders(ctx, "k")
			ended := ctx.Err() != nil
			cancel()
			_ = e.Close()
			if ended {
				t.Fatalf("%s: the calls failed only when the context ended", s)
			}
			for _, err := range []error{aerr, perr, merr, herr} {
				var oe *engine.OpError
				if !errors.As(err, &oe) || oe.Engine != "postgres" || !errors.Is(err, tc.want) {
					t.Errorf("%s: want *engine.OpError wrapping %v, got %T %v", s, tc.want, err, err)
				}
				if err == nil {
					continue
				}
				for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
					if strings.Contains(text, tc.secret) {
						t.Errorf("%s: the error shows the password: %s", s, text)
					}
				}
			}
			t.Logf("%s: %v", s, aerr)
		}
	}
}

// TestGrantlessRole: a role that logs in but has no privileges on the
// tables is refused with ErrAccessDenied (42501) by both strategies, and
// the session strategy leaves no advisory lock behind (its grant
// statement takes the lock and writes the tables: refused as a whole).
func TestGrantlessRole(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	grantless := newRole(t, dsn)
	key := "grantless/" + t.Name()
	for _, s := range []Strategy{StrategySession, StrategyLease} {
		e := openT(t, grantless, WithTable(table), WithStrategy(s))
		for _, req := range []engine.Request{
			{Key: key, TTL: time.Minute, Renew: true},
			{Key: key, TTL: time.Minute, Renew: true, Wait: true},
			{Key: key, Mode: engine.Shared, TTL: time.Minute, Renew: true, Wait: true},
		} {
			l, err := e.Acquire(hangCtx(t), req)
			if l != nil {
				_ = l.Release(context.Background())
			}
			if !errors.Is(err, engine.ErrAccessDenied) || errors.Is(err, engine.ErrUnavailable) ||
				errors.Is(err, engine.ErrNotAcquired) || sqlState(err) != "42501" {
				t.Errorf("%s %v (wait %v): %v, want ErrAccessDenied (42501) only", s, req.Mode, req.Wait, err)
			}
		}
		if _, err := e.Holders(hangCtx(t), key); !errors.Is(err, engine.ErrAccessDenied) {
			t.Errorf("%s Holders: %v, want ErrAccessDenied", s, err)
		}
	}
	waitLocks(t, pool, keyHash(table, key), 0)
}

// TestLeaseKeepsNoSessionState: the lease strategy, which must work
// behind PgBouncer in transaction mode, holds no advisory lock and leaves
// no transaction open on its connections while it holds leases.
func TestLeaseKeepsNoSessionState(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	app := "cerberus_" + table
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	e := openT(t, dsn+sep+"application_name="+app, WithTable(table), WithStrategy(StrategyLease))
	acquireT(t, e, engine.Request{Key: "nostate/x", TTL: time.Minute, Renew: true})
	acquireT(t, e, engine.Request{Key: "nostate/y", Mode: engine.Shared, TTL: time.Minute, Renew: true})
	acquireT(t, e, engine.Request{Key: "nostate/z", Mode: engine.Shared, TTL: time.Minute, Limit: 2})
	var sessions, locks, open int
	if err := pool.QueryRow(hangCtx(t), "SELECT count(*), "+
		"count(*) FILTER (WHERE EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory')), "+
		"count(*) FILTER (WHERE a.state LIKE 'idle in transaction%') "+
		"FROM pg_stat_activity a WHERE a.application_name = $1", app).Scan(&sessions, &locks, &open); err != nil {
		t.Fatal(err)
	}
	if sessions == 0 || locks != 0 || open != 0 {
		t.Errorf("the lease engine's %d sessions: %d hold advisory locks, %d are in a transaction; want none",
			sessions, locks, open)
	}
}

// TestClassify: the SQLSTATEs and failures the package documentation
// names are classified as it says.
func TestClassify(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	for _, c := range []struct {
		err          error
		denied, down bool
	}{
		{pg("28000"), true, false},
		{pg("28P01"), true, false},
		{pg("42501"), true, false},
		{pg("08006"), false, true},
		{pg("08001"), false, true},
		{pg("57P01"), false, true},
		{pg("57P02"), false, true},
		{pg("57P03"), false, true},
		{pg("53300"), false, true},
		{pg("42P01"), false, false},
		{pg("23505"), false, false},
		{io.EOF, false, true},
		{fmt.Errorf("wrapped: %w", pg("57P01")), false, true},
		{context.Canceled, false, false},
		{errGaveUp, false, false},
	} {
		if denied(c.err) != c.denied || down(c.err) != c.down {
			t.Errorf("%v: denied %v, down %v; want %v, %v", c.err, denied(c.err), down(c.err), c.denied, c.down)
		}
	}
	// Nothing is unavailable once the caller's context has ended.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := &Engine{}
	if err := e.opErr(ctx, "acquire", "k", pg("57P01")); errors.Is(err, engine.ErrUnavailable) ||
		!errors.Is(err, context.Canceled) {
		t.Errorf("after the caller's cancel: %v", err)
	}
}

// TestKeyHash pins the documented hash: the first 8 bytes of SHA-256 of
// table, NUL, key, big-endian.
func TestKeyHash(t *testing.T) {
	if got := keyHash("cerberus_locks", "order:42"); got != 8828471517467149621 {
		t.Errorf("keyHash = %d", got)
	}
	if got := keyHash("t", ""); got != 3996392089925670987 {
		t.Errorf("keyHash of the empty key = %d", got)
	}
	if keyHash("a", "bc") == keyHash("ab", "c") {
		t.Errorf("the table and the key run together")
	}
	for h, want := range map[int64][2]int64{77: {0, 77}, -5: {4294967295, 4294967291}} {
		if c, o := lockParts(h); c != want[0] || o != want[1] {
			t.Errorf("lockParts(%d) = %d, %d; want %v", h, c, o, want)
		}
	}
}

func TestIdleTimeout(t *testing.T) {
	for ttl, want := range map[time.Duration]string{
		10 * time.Millisecond:   "10",
		1500 * time.Microsecond: "2",
		time.Second:             "1000",
		engine.MaxTTL:           "604800000",
	} {
		if got := idleTimeout(ttl); got != want {
			t.Errorf("idleTimeout(%v) = %q, want %q", ttl, got, want)
		}
	}
}

// TestNewKeepsPool: an engine on the caller's pool uses it: one session
// connection carries every uncontended lease, a waiter pins another, and
// a further waiter waits for a connection until its context ends it; the
// connection kept back serves Holders meanwhile, and Close leaves the pool
// open.
func TestNewKeepsPool(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	pool := rawPool(t, dsn+sep+"pool_max_conns=3")
	if _, err := New(pool, WithTable(table)); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("New on a pool of 3 with 2 session conns: %v, want ErrInvalidRequest", err)
	}
	e, err := New(pool, WithTable(table), WithSessionConns(1))
	if err != nil {
		t.Fatal(err)
	}
	req := func(key string) engine.Request {
		return engine.Request{Key: key, TTL: time.Minute, Renew: true, Wait: true}
	}
	a := acquireT(t, e, req("pool/a"))
	b := acquireT(t, e, req("pool/b"))
	if pa, pb := pidOf(t, a), pidOf(t, b); pa != pb {
		t.Errorf("two uncontended leases on one session conn: pids %d and %d", pa, pb)
	}
	waited := make(chan engine.Lease, 1)
	go func() {
		l, err := e.Acquire(hangCtx(t), req("pool/a"))
		if err != nil {
			t.Error(err)
		}
		waited <- l
	}()
	waitLocks(t, pool, keyHash(table, "pool/a"), 2)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err = e.Acquire(ctx, req("pool/b"))
	cancel()
	if !errors.Is(err, engine.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second waiter on a pool of 3: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	mustHold(t, e, "pool/b", engine.Holder{Mode: engine.Exclusive, Token: b.Token()})
	if err := a.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	if l := <-waited; l != nil && pidOf(t, l) == pidOf(t, b) {
		t.Errorf("the waiter was granted on the session conn")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(hangCtx(t)); err != nil {
		t.Errorf("the caller's pool after Close: %v", err)
	}
}

package postgres

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cerberus-go/cerberus/engine"
)

func sessionReq(key string, ttl time.Duration) engine.Request {
	return engine.Request{Key: key, Mode: engine.Exclusive, TTL: ttl, Renew: true, Wait: true}
}

// TestCollision: with a hash that sends every key to one advisory lock,
// two keys serialize each other (a TryLock of one is refused while the
// other is held, a waiter for one is granted when the other is released)
// but exclusion is never lost, and tokens, values and Holders stay per
// real key.
func TestCollision(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	var b [8]byte
	_, _ = rand.Read(b[:])
	one := int64(binary.BigEndian.Uint64(b[:]))
	same := withHash(func(string) int64 { return one })
	a := openT(t, dsn, WithTable(table), same)
	c := openT(t, dsn, WithTable(table), same)
	x, y := "collide/x", "collide/y"

	lx := acquireT(t, a, engine.Request{Key: x, TTL: time.Minute, Renew: true, Value: "vx"})
	try := engine.Request{Key: y, TTL: time.Minute, Renew: true}
	if l, err := c.Acquire(hangCtx(t), try); !errors.Is(err, engine.ErrNotAcquired) {
		if l != nil {
			_ = l.Release(context.Background())
		}
		t.Fatalf("TryLock of %q while %q (same hash) is held: %v, want ErrNotAcquired (false contention)", y, x, err)
	}
	got := make(chan engine.Lease, 1)
	go func() {
		req := try
		req.Wait, req.Value = true, "vy"
		l, err := c.Acquire(hangCtx(t), req)
		if err != nil {
			t.Errorf("waiting for %q: %v", y, err)
		}
		got <- l
	}()
	mustHold(t, a, x, engine.Holder{Mode: engine.Exclusive, Token: lx.Token(), Value: "vx"})
	mustHold(t, a, y)
	if err := lx.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	ly := <-got
	if ly == nil {
		t.FailNow()
	}
	// Tokens count per real key: each key's counter row holds its own
	// last token.
	pool := rawPool(t, dsn)
	checkFences(t, pool, table, map[string]uint64{x: lx.Token(), y: ly.Token()})
	mustHold(t, a, y, engine.Holder{Mode: engine.Exclusive, Token: ly.Token(), Value: "vy"})
	mustHold(t, a, x)
	if err := ly.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}

	// Shared leases of the two keys overlap, and Holders keeps them apart.
	sx := acquireT(t, a, engine.Request{Key: x, Mode: engine.Shared, TTL: time.Minute, Renew: true, Value: "sx"})
	sy := acquireT(t, c, engine.Request{Key: y, Mode: engine.Shared, TTL: time.Minute, Renew: true, Value: "sy"})
	if sx.Token() <= lx.Token() || sy.Token() <= ly.Token() {
		t.Errorf("second tokens: %d and %d, want above %d and %d", sx.Token(), sy.Token(), lx.Token(), ly.Token())
	}
	checkFences(t, pool, table, map[string]uint64{x: sx.Token(), y: sy.Token()})
	mustHold(t, c, x, engine.Holder{Mode: engine.Shared, Token: sx.Token(), Value: "sx"})
	mustHold(t, a, y, engine.Holder{Mode: engine.Shared, Token: sy.Token(), Value: "sy"})
	if l, err := c.Acquire(hangCtx(t), try); !errors.Is(err, engine.ErrNotAcquired) {
		if l != nil {
			_ = l.Release(context.Background())
		}
		t.Fatalf("exclusive TryLock of %q while both keys are shared: %v, want ErrNotAcquired", y, err)
	}
	_ = sx.Release(hangCtx(t))
	_ = sy.Release(hangCtx(t))

	// Under load, every key colliding: never two holders at once (the
	// hash makes all of them one lock), and each key's tokens strictly
	// increase in grant order.
	const clients, rounds = 4, 25
	keys := []string{"collide/p", "collide/q", "collide/r"}
	var (
		inside, over atomic.Int64
		mu           sync.Mutex
		last         = map[string]uint64{}
		wg           sync.WaitGroup
	)
	for i := range clients {
		e := openT(t, dsn, WithTable(table), same)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				key := keys[(i+r)%len(keys)]
				l, err := e.Acquire(hangCtx(t), sessionReq(key, time.Minute))
				if err != nil {
					t.Errorf("acquire %q: %v", key, err)
					return
				}
				if inside.Add(1) > 1 {
					over.Add(1)
				}
				mu.Lock()
				if l.Token() <= last[key] {
					t.Errorf("%q: token %d after %d", key, l.Token(), last[key])
				}
				last[key] = l.Token()
				mu.Unlock()
				inside.Add(-1)
				if err := l.Release(hangCtx(t)); err != nil {
					t.Errorf("release %q: %v", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := over.Load(); n > 0 {
		t.Errorf("%d grants overlapped another holder of a colliding key", n)
	}
}

// checkFences checks that each key's row in table's "_fences" holds the
// token given for it.
func checkFences(t *testing.T, pool *pgxpool.Pool, table string, want map[string]uint64) {
	t.Helper()
	for key, token := range want {
		var got int64
		err := pool.QueryRow(hangCtx(t), `SELECT token FROM "`+table+`_fences" WHERE lock_key = $1`, key).Scan(&got)
		if err != nil || uint64(got) != token {
			t.Errorf("counter of %q: %d (%v), want its own last token %d", key, got, err, token)
		}
	}
}

// TestCollisionOneBackend: one shared backend releases key x and then
// takes y, which has the same lock id. x's exclusive holder record still
// names that backend, which pg_locks shows holding the lock id: Holders
// and List must not take x for held (a later record of the backend and
// lock id, y's, is the one it holds), and a key whose record is older
// than the backend's release is not listed either.
func TestCollisionOneBackend(t *testing.T) {
	dsn := testDSN(t)
	var b [8]byte
	_, _ = rand.Read(b[:])
	one := int64(binary.BigEndian.Uint64(b[:]))
	e := openT(t, dsn, WithTable(testTable(t, dsn)), withHash(func(string) int64 { return one }),
		WithSessionConns(1))
	lx := acquireT(t, e, engine.Request{Key: "one/x", TTL: time.Minute, Renew: true, Value: "vx"})
	px := pidOf(t, lx)
	if err := lx.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	ly := acquireT(t, e, engine.Request{Key: "one/y", TTL: time.Minute, Renew: true, Value: "vy"})
	defer ly.Release(context.Background())
	if py := pidOf(t, ly); py != px {
		t.Fatalf("the two leases are on backends %d and %d; the test needs one", px, py)
	}
	mustHold(t, e, "one/x")
	mustHold(t, e, "one/y", engine.Holder{Mode: engine.Exclusive, Token: ly.Token(), Value: "vy"})
	inv, err := e.List(hangCtx(t), "one/", 0)
	if err != nil || len(inv.Keys) != 1 || inv.Keys[0].Key != "one/y" {
		t.Errorf("List = %+v, %v; want one/y alone", inv, err)
	}
}

func acquireT(t *testing.T, e *Engine, req engine.Request) engine.Lease {
	t.Helper()
	l, err := e.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatalf("acquire %q: %v", req.Key, err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// mustHold fails unless Holders of key lists exactly want.
func mustHold(t *testing.T, e *Engine, key string, want ...engine.Holder) {
	t.Helper()
	hs, err := e.Holders(hangCtx(t), key)
	if err != nil {
		t.Fatalf("Holders(%q): %v", key, err)
	}
	if fmt.Sprint(hs) != fmt.Sprint(want) {
		t.Fatalf("Holders(%q) = %+v, want %+v", key, hs, want)
	}
}

// TestCancelledWaitLeavesNothing: a waiter whose context is cancelled
// returns ErrNotAcquired joined with context.Canceled, its queued request
// is gone from pg_locks (no backend waits for or holds the lock but the
// holder's), and once the holder releases nothing is left.
func TestCancelledWaitLeavesNothing(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	a := openT(t, dsn, WithTable(table))
	b := openT(t, dsn, WithTable(table))
	key := "cancel/" + t.Name()
	h := keyHash(table, key)
	holder := acquireT(t, a, sessionReq(key, time.Minute))
	for _, mode := range []engine.Mode{engine.Exclusive, engine.Shared} {
		ctx, cancel := context.WithCancel(t.Context())
		res := make(chan error, 1)
		go func() {
			req := sessionReq(key, time.Minute)
			req.Mode = mode
			l, err := b.Acquire(ctx, req)
			if l != nil {
				_ = l.Release(context.Background())
				err = errors.New("granted while held")
			}
			res <- err
		}()
		// Wait until the request is queued on the server, then cancel.
		waitLocks(t, pool, h, 2)
		cancel()
		err := <-res
		if !errors.Is(err, engine.ErrNotAcquired) || !errors.Is(err, context.Canceled) ||
			errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("%v wait cancelled: %v, want ErrNotAcquired joined with context.Canceled", mode, err)
		}
		waitLocks(t, pool, h, 1)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(b.pins); n != 0 {
		t.Errorf("%d connections still pinned after Close", n)
	}
	if err := holder.Release(hangCtx(t)); err != nil {
		t.Fatal(err)
	}
	waitLocks(t, pool, h, 0)
	left, err := heldSession(pool, table)(hangCtx(t), key)
	if err != nil || len(left) > 0 {
		t.Fatalf("after the release: %v, %v; want nothing", left, err)
	}
}

// waitLocks waits until pg_locks shows n locks (held or waited for) on h.
func waitLocks(t *testing.T, pool *pgxpool.Pool, h int64, n int) {
	t.Helper()
	var locks []string
	for deadline := time.Now().Add(hang); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var err error
		locks, err = advisoryLocks(t.Context(), pool, h)
		if err != nil {
			t.Fatal(err)
		}
		if len(locks) == n {
			return
		}
	}
	t.Fatalf("pg_locks shows %v, want %d entries", locks, n)
}

// TestTerminatedHolder: pg_terminate_backend on a renewed holder's
// connection ends its lease with ErrLeaseLost (Done and OnLost) at its
// next ping; its stale holder record is not listed by Holders; its Release is
// ErrNotHeld; the next holder gets a larger token.
func TestTerminatedHolder(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	a := openT(t, dsn, WithTable(table))
	b := openT(t, dsn, WithTable(table))
	key := "kill/" + t.Name()
	var lost atomic.Int64
	var lostErr atomic.Value
	req := sessionReq(key, time.Second)
	req.OnLost = func(err error) { lost.Add(1); lostErr.Store(err) }
	la, err := a.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	pid := pidOf(t, la)
	if _, err := pool.Exec(hangCtx(t), "SELECT pg_terminate_backend($1)", int(pid)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	case <-time.After(hang):
		t.Fatal("Done of the terminated holder did not close")
	}
	if !errors.Is(la.Err(), engine.ErrLeaseLost) {
		t.Errorf("Err() = %v, want ErrLeaseLost", la.Err())
	}
	if n := lost.Load(); n != 1 {
		t.Errorf("OnLost called %d times, want 1", n)
	} else if err, _ := lostErr.Load().(error); !errors.Is(err, engine.ErrLeaseLost) {
		t.Errorf("OnLost got %v, want ErrLeaseLost", err)
	}
	var rows int
	if err := pool.QueryRow(hangCtx(t), "SELECT count(*) FROM "+quote(table+"_fences")+
		" WHERE lock_key = $1 AND pid = $2", key, int(pid)).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Errorf("%d holder records naming the killed backend, want the stale one", rows)
	}
	mustHold(t, b, key) // the stale record does not count
	if err := la.Release(hangCtx(t)); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("Release of the terminated lease: %v, want ErrNotHeld", err)
	}
	try := sessionReq(key, time.Minute)
	try.Wait = false
	lb := acquireT(t, b, try)
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after the terminated holder's %d", lb.Token(), la.Token())
	}
	mustHold(t, b, key, engine.Holder{Mode: engine.Exclusive, Token: lb.Token()})
}

// pidOf returns the backend pid of a held session lease's connection.
func pidOf(t *testing.T, l engine.Lease) uint32 {
	t.Helper()
	if ml, ok := l.(*muxLease); ok {
		c := ml.Conn()
		if c == nil {
			t.Fatalf("the lease of %q has ended: %v", l.Key(), l.Err())
		}
		return c.(*muxConn).conn.Conn().PgConn().PID()
	}
	sl := l.(*sessionLease)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.conn == nil {
		t.Fatalf("the lease of %q has ended: %v", l.Key(), l.Err())
	}
	return sl.conn.Conn().PgConn().PID()
}

// TestTokensAcrossRestarts: a key's tokens strictly increase across
// engines that close and new ones that open, and across a holder whose
// session was ended without a release.
func TestTokensAcrossRestarts(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	key := "tokens/" + t.Name()
	var last uint64
	for i := range 3 {
		e, err := Open(dsn, WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		l, err := e.Acquire(hangCtx(t), sessionReq(key, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("engine %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if i == 1 {
			// End the session under the lease, as a crash would.
			pid := pidOf(t, l)
			if _, err := pool.Exec(hangCtx(t), "SELECT pg_terminate_backend($1)", int(pid)); err != nil {
				t.Fatal(err)
			}
		} else if err := l.Release(hangCtx(t)); err != nil {
			t.Fatal(err)
		}
		_ = e.Close()
	}
}

// The holder process of TestPausedHolderCutOff.
const (
	holderEnv      = "CERBERUS_POSTGRES_TEST_HOLDER"
	holderDSNEnv   = "CERBERUS_POSTGRES_TEST_HOLDER_DSN"
	holderTableEnv = "CERBERUS_POSTGRES_TEST_HOLDER_TABLE"
	holderKeyEnv   = "CERBERUS_POSTGRES_TEST_HOLDER_KEY"
	holderTTLEnv   = "CERBERUS_POSTGRES_TEST_HOLDER_TTL"
	// pausedExtra is how many more leases the holder process takes
	// first, on keys "<key>/<i>", with pausedExtraTTL: they share the
	// holder's connections with the key's lease.
	pausedExtra    = 1000
	pausedExtraTTL = 3 * time.Second
)

// runHolder is the test binary run as a holder process: it takes
// pausedExtra renewed session leases on "<key>/<i>", then the key named by
// its environment with a renewed session lease, prints "held <token>", and
// when the lease ends prints "lost <error>" and exits.
func runHolder() int {
	ttl, err := time.ParseDuration(os.Getenv(holderTTLEnv))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	e, err := Open(os.Getenv(holderDSNEnv), WithTable(os.Getenv(holderTableEnv)))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	for i := range pausedExtra {
		key := fmt.Sprintf("%s/%d", os.Getenv(holderKeyEnv), i)
		if _, err := e.Acquire(ctx, sessionReq(key, pausedExtraTTL)); err != nil {
			fmt.Println("error", err)
			return 2
		}
	}
	l, err := e.Acquire(ctx, sessionReq(os.Getenv(holderKeyEnv), ttl))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	fmt.Println("held", l.Token())
	select {
	case <-l.Done():
		fmt.Println("lost", l.Err())
	case <-time.After(2 * time.Minute):
		fmt.Println("still held")
	}
	return 0
}

// TestPausedHolderCutOff: a holder process with a renewed one-second
// lease, and pausedExtra more leases of pausedExtraTTL on the same shared
// connections, is SIGSTOPped. Its sockets stay open, so only the server's
// idle_session_timeout can free the keys: a waiter here must be granted
// the key, and then every other key within their period (without it the
// wait would last until the TCP keepalive, hours). When the holder
// resumes, its next ping fails and its lease ends with ErrLeaseLost; the
// waiter's token is larger.
func TestPausedHolderCutOff(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	key := "paused/" + t.Name()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"=1", holderDSNEnv+"="+dsn, holderTableEnv+"="+table,
		holderKeyEnv+"="+key, holderTTLEnv+"=1s")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	line := func(prefix string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, prefix) {
				t.Fatalf("holder process: %q, want a %q line", l, prefix)
			}
			return l
		case <-time.After(hang):
			t.Fatalf("no %q line from the holder process within %v", prefix, hang)
		}
		return ""
	}
	var token uint64
	if _, err := fmt.Sscanf(line("held "), "held %d", &token); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	e := openT(t, dsn, WithTable(table))
	l, err := e.Acquire(hangCtx(t), sessionReq(key, time.Minute))
	if err != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		t.Fatalf("the paused holder's key was not freed by the server: %v", err)
	}
	if l.Token() <= token {
		t.Errorf("token %d after the paused holder's %d", l.Token(), token)
	}
	stopped := time.Now()
	for i := range pausedExtra {
		key := fmt.Sprintf("%s/%d", key, i)
		ctx, cancel := context.WithTimeout(t.Context(), pausedExtraTTL+hang/2)
		x, err := e.Acquire(ctx, engine.Request{Key: key, TTL: time.Minute, Wait: true})
		cancel()
		if err != nil {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("the paused holder's lease of %q was not cut off %v after the pause: %v", key,
				time.Since(stopped), err)
		}
		if err := x.Release(hangCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the paused holder's %d other leases were all free %v after the first", pausedExtra, time.Since(stopped))
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if lost := line("lost "); !strings.Contains(lost, engine.ErrLeaseLost.Error()) {
		t.Errorf("the resumed holder said %q, want ErrLeaseLost", lost)
	}
	if err := l.Release(hangCtx(t)); err != nil {
		t.Errorf("the new holder's release: %v", err)
	}
}

// TestGrantCommitsAsync: the grant statement sets synchronous_commit off
// for its own transaction only (so a grant waits for no WAL flush; the
// token rests on the server's clock, see sessionGrant): off inside the
// grant's transaction, the session's own setting after it. The release
// puts back the session's idle_session_timeout.
func TestGrantCommitsAsync(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	e := openT(t, dsn, WithTable(table))
	ctx := hangCtx(t)
	c, err := rawPool(t, dsn).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	show := func(q pgx.Tx) string {
		t.Helper()
		var v string
		var err error
		if q != nil {
			err = q.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v)
		} else {
			err = c.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v)
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	grant := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) {
		t.Helper()
		var ok bool
		var token *int64
		err := q.QueryRow(ctx, e.q.grantTry, e.cfg.hash("async"), "60000", "async", 0, "").Scan(&ok, &token, nil)
		if err != nil || !ok || token == nil {
			t.Fatalf("grant: %v, %v, %v", ok, token, err)
		}
		if _, err := c.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
			t.Fatal(err)
		}
	}
	def := show(nil)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	grant(tx)
	if in := show(tx); in != "off" {
		t.Errorf("synchronous_commit in the grant's transaction: %q, want off", in)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	grant(c)
	if after := show(nil); after != def {
		t.Errorf("synchronous_commit after a grant: %q, want the session's %q", after, def)
	}
	// The release puts back the idle_session_timeout the grant found.
	var ok bool
	var idle, was, now string
	h := e.cfg.hash("async")
	if _, err := c.Exec(ctx, "SET idle_session_timeout = '7min'"); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "SHOW idle_session_timeout").Scan(&was); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, e.q.grantTry, h, "60000", "async", 0, "").Scan(&ok, nil, &idle); err != nil || !ok {
		t.Fatalf("grant: %v, %v", ok, err)
	}
	q, args := e.releaseOf(engine.Exclusive, h, idle, "async", 0)
	if err := c.QueryRow(ctx, q, args...).Scan(&ok, nil); err != nil || !ok {
		t.Fatalf("release: %v, %v", ok, err)
	}
	if err := c.QueryRow(ctx, "SHOW idle_session_timeout").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if now != was {
		t.Errorf("idle_session_timeout after a release: %q, want %q as before the grant", now, was)
	}
}

// TestLongWaitKeepsItsPeriod: a waiter whose wait lasts several of its
// lease periods (its one grant statement was sent long before the grant)
// still gets a lease valid for about a period after Acquire returns: the
// late answer is confirmed by a ping, whose send time anchors the lease.
func TestLongWaitKeepsItsPeriod(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	a := openT(t, dsn, WithTable(table))
	b := openT(t, dsn, WithTable(table))
	key := "longwait/" + t.Name()
	la := acquireT(t, a, sessionReq(key, time.Minute))
	ttl := 300 * time.Millisecond
	go func() {
		time.Sleep(3 * ttl)
		_ = la.Release(context.Background())
	}()
	req := sessionReq(key, ttl)
	req.Renew = false
	start := time.Now()
	lb, err := b.Acquire(hangCtx(t), req)
	if err != nil {
		t.Fatalf("acquire after a wait of %v: %v", time.Since(start), err)
	}
	got := time.Now()
	<-lb.Done()
	if held := time.Since(got); held < ttl/2 {
		t.Errorf("a lease of %v granted after a %v wait lasted %v, want about its period", ttl, got.Sub(start), held)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after %d", lb.Token(), la.Token())
	}
}

// TestLongWaitKeepsKeyHot: a key waited for longer than hotFor is still
// contended once the wait is granted, so that the engine's next waiting
// Acquire of it queues in the server at once instead of trying a shared
// backend first (in no queue meanwhile). It counted from the start of the
// wait before, and had gone cold by the grant.
func TestLongWaitKeepsKeyHot(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	a := openT(t, dsn, WithTable(table))
	b := openT(t, dsn, WithTable(table))
	key := "hot/" + t.Name()
	la := acquireT(t, a, sessionReq(key, time.Minute))
	go func() {
		time.Sleep(2 * hotFor) // the wait below outlasts hotFor
		_ = la.Release(context.Background())
	}()
	start := time.Now()
	lb, err := b.Acquire(hangCtx(t), sessionReq(key, time.Minute))
	if err != nil {
		t.Fatalf("acquire after a wait of %v: %v", time.Since(start), err)
	}
	defer func() { _ = lb.Release(context.Background()) }()
	if !b.contended(b.cfg.hash(key)) {
		t.Errorf("%q counts as uncontended right after a wait of %v for it", key, time.Since(start))
	}
}

// TestMigrateLeavesBusyFencesAlone: a Migrate of tables that are up to
// date takes no lock that waits for the session strategy's grants: it
// completes while another transaction holds a write on "<table>_fences"
// (an ALTER TABLE or CREATE INDEX would wait for it, and every grant
// would queue behind them).
func TestMigrateLeavesBusyFencesAlone(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	pool := rawPool(t, dsn)
	tx, err := pool.Begin(hangCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(hangCtx(t), "INSERT INTO "+quote(table+"_fences")+" (lock_key, token) VALUES ('busy', 1)"); err != nil {
		t.Fatal(err)
	}
	e := openT(t, dsn, WithTable(table))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := e.Migrate(ctx); err != nil {
		t.Fatalf("Migrate beside a write on the fences table: %v", err)
	}
}

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// pausedCase is one engine under the paused-holder fault, with the bound
// its package documents for a paused holder's key to be free again.
type pausedCase struct {
	engine string
	addrs  []string
	table  string
	period time.Duration // the holder's lease period (watchdog TTL, or session timeout)
	bound  time.Duration // documented: another process is granted within it
}

// TestPausedHolder: a holder process takes a key with a renewed lease and
// is SIGSTOPped (a long GC pause, a frozen VM) for three lease periods. The
// test process, waiting for the key, must be granted within the engine's
// documented bound; once resumed, the holder must be told (Done closes)
// and its fenced write refused. The row strategy blocked here for hours
// before its sessions got a wait_timeout from the lease period.
func TestPausedHolder(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	table := migratedTable(t, dsn)
	pgDSN := testenv.PostgresDSN(t)
	pgTable := migratedPostgresTable(t, pgDSN)
	for _, tc := range []pausedCase{
		{engine: "redis", addrs: []string{testenv.RedisAddr(t)}, period: time.Second, bound: time.Second + 500*time.Millisecond},
		// The shared server's tickTime is 2s: it negotiates a session of at
		// least 4s, and expires it within one tick after its timeout.
		{engine: "zookeeper", addrs: []string{testenv.ZooKeeperAddr(t)}, period: 4 * time.Second, bound: 4*time.Second + 2*time.Second},
		{engine: "consul", addrs: []string{testenv.ConsulAddr(t)}, period: consul.Floor(consulSession, 0), bound: consul.Floor(consulSession, 0) + time.Second},
		// The etcd lease TTL plus the second etcd's lessor may take to
		// revoke an expired lease: Limits().Floor.
		{engine: "etcd", addrs: []string{testenv.EtcdAddr(t)}, period: etcdLease, bound: etcdLease + time.Second},
		{engine: "mysql", addrs: []string{dsn}, table: table, period: time.Second, bound: time.Second + 500*time.Millisecond},
		{engine: "mysql-row", addrs: []string{dsn}, table: table, period: time.Second, bound: time.Second + 2*time.Second},
		// The same wait_timeout cuts a silent GET_LOCK holder's session.
		{engine: "mysql-session", addrs: []string{dsn}, table: table, period: time.Second, bound: time.Second + 2*time.Second},
		{engine: "mysql-clock", addrs: []string{dsn}, table: table, period: time.Second, bound: time.Second + 2*time.Second},
		{engine: "postgres-lease", addrs: []string{pgDSN}, table: pgTable, period: time.Second, bound: time.Second + 500*time.Millisecond},
		// The server ends a silent holder's session after its
		// idle_session_timeout (the lease period); its checks run on a timer
		// of the server's, hence the wider bound, as for the row strategy.
		{engine: "postgres", addrs: []string{pgDSN}, table: pgTable, period: time.Second, bound: time.Second + 2*time.Second},
		{engine: "postgres-clock", addrs: []string{pgDSN}, table: pgTable, period: time.Second, bound: time.Second + 2*time.Second},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			t.Parallel()
			pausedHolder(t, tc)
		})
	}
}

// migratedTable migrates a lock table of its own on the shared MySQL.
func migratedTable(t *testing.T, dsn string) string {
	t.Helper()
	table := strings.ReplaceAll(unique(t, "paused"), "-", "_")
	e, err := mysql.Open(dsn, mysql.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Migrate(testContext(t)); err != nil {
		t.Fatal(err)
	}
	for _, strategy := range []mysql.Strategy{mysql.StrategyRow} {
		r, err := mysql.Open(dsn, mysql.WithTable(table), mysql.WithStrategy(strategy))
		if err != nil {
			t.Fatal(err)
		}
		err = r.Migrate(testContext(t))
		_ = r.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return table
}

// specClient is a Client in the test process over the engine spec
// names, closed when the test ends.
func specClient(t *testing.T, spec workerSpec) *cerberus.Client {
	t.Helper()
	e, err := dialEngine(spec)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); _ = e.Close() })
	return c
}

func pausedHolder(t *testing.T, tc pausedCase) {
	f := startFence(t)
	dir := t.TempDir()
	key := unique(t, "paused/"+tc.engine)
	spec := workerSpec{Engine: tc.engine, Addrs: tc.addrs, Table: tc.table, Prefix: key, TTL: tc.period,
		Call: 10 * time.Second, Duration: time.Minute + 3*tc.period, Fence: f.addr, HoldOne: true}
	holder := spawnWorker(t, dir, spec)
	out := filepath.Join(dir, "worker-0.log")
	line := func(prefix string, within time.Duration) string {
		t.Helper()
		for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
			b, _ := os.ReadFile(out)
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, prefix) {
					return l
				}
			}
			if time.Now().After(deadline) {
				entries, _ := os.ReadDir(dir)
				t.Fatalf("no %q line from the holder within %v in %s (%v):\n%s", prefix, within, out, entries, b)
			}
		}
	}
	line("held ", 20*time.Second)

	c := specClient(t, spec)
	stopped := time.Now()
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Signal(syscall.SIGCONT) })
	ctx, cancel := context.WithTimeout(context.Background(), tc.bound+10*time.Second)
	l, err := c.Lock(ctx, key, cerberus.WithWatchdog(tc.period))
	cancel()
	granted := time.Since(stopped)
	if err != nil {
		t.Fatalf("the waiter was not granted within %v of the pause: %v", tc.bound+10*time.Second, err)
	}
	if !f.take(key, l.Token(), "waiter") {
		t.Fatalf("the waiter's fenced write (token %d) was refused", l.Token())
	}
	time.Sleep(time.Until(stopped.Add(3 * tc.period)))
	resumed := time.Now()
	if err := holder.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var at int64
	lost := line("lost ", 30*time.Second)
	if _, err := fmt.Sscan(strings.Fields(lost)[1], &at); err != nil {
		t.Fatalf("bad line %q", lost)
	}
	told := time.Unix(0, at).Sub(resumed)
	write := line("write ", 10*time.Second)
	fmt.Printf("PAUSED %s: period %v, granted to another process %v after the pause (bound %v); holder told %v after it resumed; its write: %s\n",
		tc.engine, tc.period, granted.Round(time.Millisecond), tc.bound, told.Round(time.Millisecond), strings.TrimPrefix(write, "write "))
	if granted > tc.bound {
		t.Errorf("granted %v after the pause, over the documented bound %v", granted, tc.bound)
	}
	if write != "write stale" {
		t.Errorf("the resumed holder's fenced write: %q, want it refused (stale)", write)
	}
	_ = l.Unlock(context.Background())
}

// TestPausedWaiterRowStrategy: a waiter process queued on a row lock is
// SIGSTOPped; the holder releases, so the server grants the row to the
// stopped waiter's session, and ends that session a wait_timeout later
// since nobody reads the answer. Another process then locks the key. When
// the waiter resumes and reads its stale grant, it must not believe it
// holds the key: it waits until the other process releases, and then
// gets a larger token.
func TestPausedWaiterRowStrategy(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	table := migratedTable(t, dsn)
	key := unique(t, "paused-waiter")
	f := startFence(t)
	spec := workerSpec{Engine: "mysql-row", Addrs: []string{dsn}, Table: table, Prefix: key, TTL: time.Second,
		Call: time.Minute, Duration: time.Minute, Fence: f.addr, HoldOne: true}
	c := specClient(t, spec)
	ctx := testContext(t)
	first, err := c.Lock(ctx, key, cerberus.WithWatchdog(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	waiter := spawnWorker(t, dir, spec)
	time.Sleep(time.Second) // the waiter is queued on the row
	if err := waiter.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Process.Signal(syscall.SIGCONT) })
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // past the waiter session's 1s wait_timeout
	second, err := c.Lock(ctx, key, cerberus.WithWatchdog(time.Second))
	if err != nil {
		t.Fatalf("the row was not free after the stopped waiter's session timed out: %v", err)
	}
	if err := waiter.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "worker-0.log")
	time.Sleep(1500 * time.Millisecond)
	if b, _ := os.ReadFile(out); strings.Contains(string(b), "held ") {
		t.Fatalf("the resumed waiter took its stale grant while another process holds the key (token %d):\n%s", second.Token(), b)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(out)
		var tok uint64
		if i := strings.Index(string(b), "held "); i >= 0 {
			if _, err := fmt.Sscan(string(b)[i+5:], &tok); err != nil || tok <= second.Token() {
				t.Fatalf("the waiter's token %d is not above %d", tok, second.Token())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter was not granted after the key was released:\n%s", b)
		}
	}
}

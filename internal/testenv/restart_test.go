package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// restarts is how often TestRestartTwentyTimes restarts each server.
const restarts = 20

// TestRestartTwentyTimes starts each kind of private server and restarts
// it 20 times in a row, checking after each restart that it answers a
// real client request. PostgreSQL gets the hard case: before each restart
// a backend is left busy in a long CPU-bound query, which notices neither
// its postmaster's death nor a lost client; a restart that did not kill it
// would find the old shared memory still attached ("pre-existing shared
// memory block ... is still in use").
func TestRestartTwentyTimes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"PostgreSQL", restartPostgres},
		{"MariaDB", restartMariaDB},
		{"Redis", restartRedis},
		{"ZooKeeper", restartZooKeeper},
		{"Consul", restartConsul},
		{"etcd", restartEtcd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			tc.run(t)
			t.Logf("%d restarts in %v", restarts, time.Since(start).Round(time.Millisecond))
		})
	}
}

// restartEach restarts p restarts times, calling before (if not nil)
// before each restart and check after it, which must succeed at once.
func restartEach(t *testing.T, p *Process, before func(i int), check func(ctx context.Context) error) {
	t.Helper()
	if err := check(within(t, 10*time.Second)); err != nil {
		t.Fatalf("before the first restart: %v", err)
	}
	for i := 1; i <= restarts; i++ {
		if before != nil {
			before(i)
		}
		old := p.Pid()
		p.Restart()
		if p.Pid() == old {
			t.Fatalf("restart %d: the pid is still %d", i, old)
		}
		if err := check(within(t, 10*time.Second)); err != nil {
			t.Fatalf("after restart %d: %v", i, err)
		}
	}
}

func restartPostgres(t *testing.T) {
	pg := StartPostgres(t)
	var busy *busyQuery
	before := func(int) { busy = startBusyQuery(t, pg.DSN) }
	check := func(ctx context.Context) error {
		if busy != nil {
			busy.gone(t)
			busy = nil
		}
		conn, err := pgx.Connect(ctx, pg.DSN)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity").Scan(&n); err != nil {
			return err
		}
		if n < 1 {
			return fmt.Errorf("pg_stat_activity has %d rows", n)
		}
		return nil
	}
	restartEach(t, pg.Process, before, check)
}

// busyQuery is a PostgreSQL backend running a long CPU-bound query.
type busyQuery struct {
	pid  int        // the backend's pid
	stat procInfo   // its /proc stat when it was seen busy
	done chan error // receives the query's result
	stop func()     // cancels the client's context
}

// startBusyQuery opens a connection to dsn, sends a query that counts to
// 10^10 (minutes of CPU; its statement_timeout of 2 minutes and the
// client's context of the same length bound it), and returns once the
// server reports the query active. The backend runs it alone: PostgreSQL
// backends check for their postmaster's death only while they wait.
func startBusyQuery(t *testing.T, dsn string) *busyQuery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		cancel()
		t.Fatalf("busy query: connect: %v", err)
	}
	b := &busyQuery{done: make(chan error, 1), stop: cancel}
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&b.pid); err != nil {
		cancel()
		t.Fatalf("busy query: pg_backend_pid: %v", err)
	}
	go func() {
		defer conn.Close(context.Background())
		_, err := conn.Exec(ctx, "SET statement_timeout = '120s'")
		if err == nil {
			var n int64
			err = conn.QueryRow(ctx, busyQueryText).Scan(&n)
		}
		b.done <- err
	}()
	b.waitActive(t, dsn)
	return b
}

// busyQueryText is how pg_stat_activity shows the busy query.
const busyQueryText = "SELECT count(*) FROM generate_series(1::bigint, 10000000000)"

// waitActive waits until pg_stat_activity, read on a connection of its
// own, shows the busy query active in its backend, and /proc shows the
// backend running.
func (b *busyQuery) waitActive(t *testing.T, dsn string) {
	t.Helper()
	ctx := within(t, 10*time.Second)
	watch, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("busy query: watcher: %v", err)
	}
	defer watch.Close(context.Background())
	for {
		var active bool
		err := watch.QueryRow(ctx, "SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $1 "+
			"AND state = 'active' AND query = $2", b.pid, busyQueryText).Scan(&active)
		info, ok := procOf(b.pid)
		if err == nil && active && ok && info.state == 'R' {
			b.stat = info
			return
		}
		select {
		case err := <-b.done:
			t.Fatalf("busy query ended before the restart: %v", err)
		case <-ctx.Done():
			t.Fatalf("backend %d is not running the busy query after 10s (state %c, %v)", b.pid, info.state, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// gone checks that the busy backend has exited (Kill promises it) and
// that its client saw the connection end.
func (b *busyQuery) gone(t *testing.T) {
	t.Helper()
	defer b.stop()
	if info, ok := procOf(b.pid); ok && info.start == b.stat.start && info.state != 'Z' {
		t.Fatalf("the busy backend %d survived the restart (state %c)", b.pid, info.state)
	}
	select {
	case err := <-b.done:
		if err == nil {
			t.Fatalf("the busy query finished although its server was killed")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the busy query's client did not notice the restart within 10s")
	}
}

func restartMariaDB(t *testing.T) {
	m := StartMariaDB(t)
	run := func(q string) {
		db, err := sql.Open("mysql", m.DSN+"&timeout=2s")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(within(t, 10*time.Second), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	run("CREATE TABLE kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB")
	run("INSERT INTO kv VALUES ('k', 'v')")
	check := func(ctx context.Context) error {
		db, err := sql.Open("mysql", m.DSN+"&timeout=2s")
		if err != nil {
			return err
		}
		defer db.Close()
		var v string
		if err := db.QueryRowContext(ctx, "SELECT v FROM kv WHERE k = 'k'").Scan(&v); err != nil {
			return err
		}
		if v != "v" {
			return fmt.Errorf("v = %q, want v", v)
		}
		return nil
	}
	restartEach(t, m.Process, nil, check)
}

func restartRedis(t *testing.T) {
	s := StartRedis(t)
	check := func(ctx context.Context) error {
		rc := goredis.NewClient(&goredis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		defer rc.Close()
		if err := rc.Set(ctx, "k", "v", 0).Err(); err != nil {
			return err
		}
		v, err := rc.Get(ctx, "k").Result()
		if err == nil && v != "v" {
			err = fmt.Errorf("GET k = %q, want v", v)
		}
		return err
	}
	restartEach(t, s.Process, nil, check)
}

func restartZooKeeper(t *testing.T) {
	z := StartZooKeeper(t)
	conn, _, err := zk.Connect([]string{z.Addr}, 10*time.Second, zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Create("/restarts", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create: %v", err)
	}
	conn.Close()
	check := func(ctx context.Context) error {
		d, _ := ctx.Deadline()
		dialer := func(network, addr string, _ time.Duration) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		conn, _, err := zk.Connect([]string{z.Addr}, time.Until(d), zk.WithLogger(quietZK{}),
			zk.WithDialer(dialer))
		if err != nil {
			return err
		}
		defer conn.Close()
		b, _, err := conn.Get("/restarts")
		if err == nil && string(b) != "v" {
			err = fmt.Errorf("/restarts = %q, want v", b)
		}
		return err
	}
	restartEach(t, z.Process, nil, check)
}

func restartConsul(t *testing.T) {
	c := StartConsul(t)
	check := func(ctx context.Context) error {
		client, err := consulapi.NewClient(&consulapi.Config{Address: c.Addr})
		if err != nil {
			return err
		}
		q := (&consulapi.QueryOptions{}).WithContext(ctx)
		if _, err := client.KV().Put(&consulapi.KVPair{Key: "restarts", Value: []byte("v")},
			(&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
			return err
		}
		p, _, err := client.KV().Get("restarts", q)
		if err == nil && (p == nil || string(p.Value) != "v") {
			err = fmt.Errorf("restarts = %v, want v", p)
		}
		return err
	}
	restartEach(t, c.Process, nil, check)
}

func restartEtcd(t *testing.T) {
	e := StartEtcd(t)
	check := func(ctx context.Context) error {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Addr}, DialTimeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer cli.Close()
		if _, err := cli.Put(ctx, "restarts", "v"); err != nil {
			return err
		}
		r, err := cli.Get(ctx, "restarts")
		if err == nil && (len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v") {
			err = fmt.Errorf("restarts = %v, want v", r.Kvs)
		}
		return err
	}
	restartEach(t, e.Process, nil, check)
}

// TestKillEndsTheWholeTree starts a shell whose child leaves the process
// group and session (setsid, as a PostgreSQL backend does) and checks that
// Kill ends that child too before it returns.
func TestKillEndsTheWholeTree(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Fatalf("setsid (util-linux) is missing: %v", err)
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	script := fmt.Sprintf("setsid sh -c 'echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 300' & exec sleep 300",
		pidFile, pidFile, pidFile)
	p := newProcess(t, "process tree", "/bin/sh", []string{"-c", script}, dir, "tree.log", 10*time.Second,
		func() error { _, err := os.Stat(pidFile); return err })
	p.launch()
	p.await()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	info, ok := procOf(child)
	if !ok || info.pgrp == p.Pid() {
		t.Fatalf("the child %d is not running in a group of its own (%+v, %v)", child, info, ok)
	}
	p.Kill()
	if now, ok := procOf(child); ok && now.start == info.start && now.state != 'Z' {
		t.Fatalf("the child %d that left the group outlived Kill (state %c)", child, now.state)
	}
}

// TestPauseStopsTheWholeTree: Pause stops the processes that left the
// server's process group too (PostgreSQL's backends call setsid, and an
// open session would keep answering through one), and Resume continues
// them.
func TestPauseStopsTheWholeTree(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Fatalf("setsid (util-linux) is missing: %v", err)
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	script := fmt.Sprintf("setsid sh -c 'echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 300' & exec sleep 300",
		pidFile, pidFile, pidFile)
	p := newProcess(t, "process tree", "/bin/sh", []string{"-c", script}, dir, "tree.log", 10*time.Second,
		func() error { _, err := os.Stat(pidFile); return err })
	p.launch()
	p.await()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if info, ok := procOf(child); !ok || info.pgrp == p.Pid() {
		t.Fatalf("the child %d is not running in a group of its own (%+v, %v)", child, info, ok)
	}
	p.Pause()
	if !stopped(child) {
		t.Fatalf("the child %d that left the group was not stopped by Pause", child)
	}
	p.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for stopped(child) {
		if time.Now().After(deadline) {
			t.Fatalf("the child %d that left the group was still stopped 10s after Resume", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStartRetriesWhileThePortIsBusy starts a redis-server whose port is
// held by someone else for a moment (its Process not told about the port,
// so that the start does not wait for it): the server exits with "Address
// already in use", and the start retries until it can bind.
func TestStartRetriesWhileThePortIsBusy(t *testing.T) {
	t.Parallel()
	port := FreePort(t)
	s := prepareRedis(t, port, nil)
	s.ports = nil
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(time.Second, func() { _ = l.Close() })
	s.launch()
	s.await()
	if err := redisPing(s.Addr); err != nil {
		t.Fatalf("after the retried start: %v", err)
	}
	b, err := os.ReadFile(s.Log())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "starting it again") {
		t.Fatalf("the log %s notes no retry", s.Log())
	}
}

// TestStartWaitsForItsPorts holds a redis-server's port for a moment
// before its start: the start waits until the port binds instead of
// launching a server that cannot.
func TestStartWaitsForItsPorts(t *testing.T) {
	t.Parallel()
	port := FreePort(t)
	s := prepareRedis(t, port, nil)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	time.AfterFunc(time.Second, func() { _ = l.Close() })
	s.launch()
	s.await()
	if waited := time.Since(held); waited < time.Second {
		t.Errorf("the start returned %v after the port was taken, before it was free again", waited)
	}
	if err := redisPing(s.Addr); err != nil {
		t.Fatalf("after the start: %v", err)
	}
	b, err := os.ReadFile(s.Log())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "==== testenv: "); n != 1 || strings.Contains(string(b), "in use") {
		t.Fatalf("want one launch that found its port free, got %d log headers:\n%s", n, b)
	}
}

func redisPing(addr string) error {
	v, err := redisDo(addr, "PING")
	if err == nil && v != "PONG" {
		err = errors.New("PING answered " + v)
	}
	return err
}

// TestKillEndsTheOrphansOfAnExitedServer: the server has exited on its
// own, leaving a child that left its group (so neither a parent link nor
// the group leads to it any more); Kill finds it by the log it writes to.
func TestKillEndsTheOrphansOfAnExitedServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	script := fmt.Sprintf("setsid sh -c 'echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 300' & "+
		"while [ ! -e %s ]; do sleep 0.01; done; sleep 0.5", pidFile, pidFile, pidFile, pidFile)
	p := newProcess(t, "process tree", "/bin/sh", []string{"-c", script}, dir, "tree.log", 10*time.Second,
		func() error { _, err := os.Stat(pidFile); return err })
	p.launch()
	p.await()
	_, done := p.current()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the shell did not exit within 10s")
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	info, ok := procOf(child)
	if !ok || info.state == 'Z' {
		t.Fatalf("the child %d is not running (%+v, %v)", child, info, ok)
	}
	p.Kill()
	if now, ok := procOf(child); ok && now.start == info.start && now.state != 'Z' {
		t.Fatalf("the orphan %d of the exited server outlived Kill (state %c)", child, now.state)
	}
}

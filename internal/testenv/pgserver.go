package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Postgres is a PostgreSQL server of a test's own. Its Process methods
// pause, resume, kill and restart it.
type Postgres struct {
	// Addr is its TCP host:port on loopback.
	Addr string
	// DSN is the pgx connection URL for user postgres (trust
	// authentication) and the database test.
	DSN string
	// Dir holds its data directory (data/, kept across Restart), its unix
	// socket and its log.
	Dir string
	*Process
}

// StartPostgres starts a private PostgreSQL (the newest server under
// /usr/lib/postgresql, Debian's layout) on a FreePort of 127.0.0.1 with a
// fresh cluster made by initdb (trust authentication, superuser postgres,
// fsync off: the tests crash the process, never the machine), waits until
// it answers over TCP, creates the database test, and kills it when the
// test ends. PostgreSQL refuses to run as root: running as root, the
// server and initdb run as the system user postgres, which owns the
// server's directory. Without the server packages the test fails naming
// the command that installs them.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	Needs(t, "PostgreSQL")
	bin := postgresBin(t)
	psql := lookBinary(t, "psql")
	var cred *syscall.Credential
	dir, err := os.MkdirTemp("", "cerberus-pg-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
		return nil
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("testenv: running as root, PostgreSQL needs the system user postgres: %v (run %s)", err,
				StartCommand)
			return nil
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("testenv: %v", err)
			return nil
		}
	}
	data := filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("testenv: initdb: %v\n%s", err, lastLines(string(out), 20))
		return nil
	}
	port := FreePort(t)
	p := &Postgres{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir}
	p.DSN = "postgres://postgres@" + p.Addr + "/test?sslmode=disable"
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + dir, "-c", "fsync=off", "-c", "max_connections=300"}
	// The log is written by the test process (it opens the file), so it may
	// live in the test's own temporary directory.
	p.Process = newProcess(t, "postgres at "+p.Addr, filepath.Join(bin, "postgres"), args, t.TempDir(),
		"postgres.log", time.Minute, func() error { return postgresReady(psql, port) })
	p.cred = cred
	p.launch()
	p.await()
	return p
}

// postgresBin returns the bin directory of the newest PostgreSQL server
// installed in Debian's layout.
func postgresBin(t testing.TB) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) < pgMajor(dirs[j]) })
	if len(dirs) == 0 {
		t.Fatalf("testenv: no PostgreSQL server under /usr/lib/postgresql/*/bin: run %s (it installs it)",
			StartCommand)
		return ""
	}
	return filepath.Dir(dirs[len(dirs)-1])
}

// pgMajor is the version directory's number in /usr/lib/postgresql/N/bin/postgres.
func pgMajor(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// postgresReady logs in as postgres over TCP and creates the database test
// if it is missing.
func postgresReady(psql string, port int) error {
	run := func(sql string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, psql, "-X", "-w", "-h", "127.0.0.1", "-p", strconv.Itoa(port),
			"-U", "postgres", "-d", "postgres", "-Atc", sql)
		cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=2")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("psql over TCP: %v: %s", err, bytes.TrimSpace(out))
		}
		return string(bytes.TrimSpace(out)), nil
	}
	has, err := run("SELECT count(*) FROM pg_database WHERE datname = 'test'")
	if err != nil || has == "1" {
		return err
	}
	_, err = run("CREATE DATABASE test")
	return err
}

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
// the command that installs them. Each of settings is a name=value the
// server starts with (postgres -c), such as "max_locks_per_transaction=512".
func StartPostgres(t testing.TB, settings ...string) *Postgres {
	t.Helper()
	return startPostgres(t, nil, settings...)
}

// StartPostgresTLS is StartPostgres with TLS required on TCP: the server
// presents f's server certificate and accepts only clients whose
// certificate f's CA signed (pg_hba: hostssl ... clientcert=verify-ca;
// plain-text TCP is rejected). DSN then names sslmode=disable and does not
// work; a client sets up its own TLS.
func StartPostgresTLS(t testing.TB, f TLS) *Postgres {
	t.Helper()
	return startPostgres(t, &f)
}

func startPostgres(t testing.TB, f *TLS, settings ...string) *Postgres {
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
	var tlsArgs []string
	if f != nil {
		tlsArgs = postgresTLS(t, dir, data, cred, *f)
	}
	port := FreePort(t)
	p := &Postgres{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir}
	p.DSN = "postgres://postgres@" + p.Addr + "/test?sslmode=disable"
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + dir, "-c", "fsync=off", "-c", "max_connections=300"}
	args = append(args, tlsArgs...)
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	// The log is written by the test process (it opens the file), so it may
	// live in the test's own temporary directory.
	p.Process = newProcess(t, "postgres at "+p.Addr, filepath.Join(bin, "postgres"), args, t.TempDir(),
		"postgres.log", time.Minute, func() error {
			if f != nil {
				// psql over the unix socket: TCP needs a client certificate.
				return postgresReady(psql, dir, port)
			}
			return postgresReady(psql, "127.0.0.1", port)
		})
	p.cred = cred
	p.ports = []int{port}
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

// postgresReady logs in as postgres at host (an address, or the directory
// of the unix socket) and creates the database test if it is missing.
func postgresReady(psql, host string, port int) error {
	run := func(sql string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, psql, "-X", "-w", "-h", host, "-p", strconv.Itoa(port),
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

// postgresTLS copies f's server certificate, key and CA into dir for the
// server (which wants its key readable by its own user alone), makes
// pg_hba.conf require TLS with a client certificate signed by the CA on
// TCP (the unix socket stays trusted, for the readiness check), and
// returns the server's TLS settings.
func postgresTLS(t testing.TB, dir, data string, cred *syscall.Credential, f TLS) []string {
	t.Helper()
	names := map[string]string{f.CertFile: "server.crt", f.KeyFile: "server.key", f.CAFile: "ca.crt"}
	for from, name := range names {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatalf("testenv: %v", err)
			return nil
		}
		to := filepath.Join(dir, name)
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatalf("testenv: %v", err)
			return nil
		}
		if cred != nil {
			if err := os.Chown(to, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatalf("testenv: %v", err)
				return nil
			}
		}
	}
	hba := "local all all trust\n" +
		"hostssl all all 127.0.0.1/32 trust clientcert=verify-ca\n" +
		"hostssl all all ::1/128 trust clientcert=verify-ca\n"
	hbaFile := filepath.Join(data, "pg_hba.conf")
	if err := os.WriteFile(hbaFile, []byte(hba), 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
		return nil
	}
	if cred != nil {
		if err := os.Chown(hbaFile, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("testenv: %v", err)
			return nil
		}
	}
	return []string{"-c", "ssl=on", "-c", "ssl_cert_file=" + filepath.Join(dir, "server.crt"),
		"-c", "ssl_key_file=" + filepath.Join(dir, "server.key"),
		"-c", "ssl_ca_file=" + filepath.Join(dir, "ca.crt")}
}

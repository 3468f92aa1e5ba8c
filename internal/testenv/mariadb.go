package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// MariaDB is a MariaDB server (mariadbd) of a test's own. Its Process
// methods pause, resume, kill and restart it.
type MariaDB struct {
	// Addr is its TCP host:port on loopback.
	Addr string
	// DSN is the go-sql-driver/mysql DSN for root (no password) and the
	// database test: "root:@tcp(Addr)/test?parseTime=true".
	DSN string
	// Dir holds its data directory (data/, kept across Restart) and its
	// log.
	Dir string
	*Process
}

// mariadbLogFileSize is the InnoDB redo log size of the private servers
// (the default, 96MB, would be copied for every server).
const mariadbLogFileSize = "--innodb-log-file-size=16M"

// StartMariaDB starts a private mariadbd on a FreePort of 127.0.0.1 (and a
// unix socket of its own) with a fresh data directory, the extra arguments
// appended to its command line (for instance --ssl-cert=...), waits until
// root can log in over TCP without a password, creates the database test,
// and kills it when the test ends. Running as root, the server runs with
// --user=root.
//
// The data directory is a copy of one mariadb-install-db
// (--auth-root-authentication-method=normal --skip-test-db) makes once per
// machine and MariaDB version, kept next to the cached consul binary (see
// ConsulBinary). Without mariadbd or the mariadb client the test fails
// naming the command that installs them.
func StartMariaDB(t testing.TB, extra ...string) *MariaDB {
	t.Helper()
	mariadbd := lookBinary(t, "mariadbd", "mysqld")
	client := lookBinary(t, "mariadb", "mysql")
	install := lookBinary(t, "mariadb-install-db", "mysql_install_db")
	template := mariadbTemplate(t, mariadbd, install)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.CopyFS(data, os.DirFS(template)); err != nil {
		t.Fatalf("testenv: copying the MariaDB data directory %s: %v", template, err)
		return nil
	}
	// A unix socket path must fit in 108 bytes; t.TempDir() may not.
	sockDir, err := os.MkdirTemp("", "cerberus-mariadb-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
		return nil
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	port := FreePort(t)
	m := &MariaDB{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir}
	m.DSN = "root:@tcp(" + m.Addr + ")/test?parseTime=true"
	args := []string{"--no-defaults", "--datadir=" + data,
		"--bind-address=127.0.0.1", "--port=" + strconv.Itoa(port),
		"--socket=" + filepath.Join(sockDir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(dir, "mariadbd.pid"),
		mariadbLogFileSize, "--max-connections=500"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	args = append(args, extra...)
	m.Process = newProcess(t, "mariadbd at "+m.Addr, mariadbd, args, dir, "mariadbd.log", time.Minute,
		func() error { return mariadbReady(client, port) })
	m.ports = []int{port}
	m.launch()
	m.await()
	return m
}

// mariadbReady logs in as root over TCP and creates the database test if
// it is missing.
func mariadbReady(client string, port int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, client, "--no-defaults", "--protocol=TCP",
		"-h", "127.0.0.1", "-P", strconv.Itoa(port), "-u", "root", "--connect-timeout=2",
		"-N", "-B", "-e", "CREATE DATABASE IF NOT EXISTS test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("root login over TCP: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

var mariadbTemplates sync.Map // mariadbd path -> *templateOnce

type templateOnce struct {
	once sync.Once
	dir  string
	err  error
}

// mariadbTemplate returns a data directory made by mariadb-install-db for
// this mariadbd, making it once per machine (in cacheDir()) and version.
func mariadbTemplate(t testing.TB, mariadbd, install string) string {
	t.Helper()
	v, _ := mariadbTemplates.LoadOrStore(mariadbd, new(templateOnce))
	tpl := v.(*templateOnce)
	tpl.once.Do(func() { tpl.dir, tpl.err = makeMariaDBTemplate(mariadbd, install) })
	if tpl.err != nil {
		t.Fatalf("testenv: %v", tpl.err)
		return ""
	}
	return tpl.dir
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func makeMariaDBTemplate(mariadbd, install string) (string, error) {
	out, err := exec.Command(mariadbd, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", mariadbd, err)
	}
	// "mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu on x86_64 (Debian 12)"
	version := strings.TrimSpace(string(out))
	if _, after, ok := strings.Cut(version, "Ver "); ok {
		version, _, _ = strings.Cut(after, " ")
	}
	name := fmt.Sprintf("mariadb-datadir-%s-uid%d", unsafeName.ReplaceAllString(version, "_"),
		os.Geteuid())
	final := filepath.Join(cacheDir(), name)
	if _, err := os.Stat(filepath.Join(final, "mysql")); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(cacheDir(), 0o755); err != nil {
		return "", fmt.Errorf("MariaDB template: %w (set CERBERUS_CACHE to a writable directory)", err)
	}
	work, err := os.MkdirTemp(cacheDir(), ".mariadb-install-")
	if err != nil {
		return "", fmt.Errorf("MariaDB template: %w (set CERBERUS_CACHE to a writable directory)", err)
	}
	defer os.RemoveAll(work)
	data := filepath.Join(work, "data")
	args := []string{"--no-defaults", "--datadir=" + data,
		"--auth-root-authentication-method=normal", "--skip-test-db", mariadbLogFileSize}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, install, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", install, strings.Join(args, " "), err,
			lastLines(string(out), 20))
	}
	// Another test process may have made it meanwhile: then use theirs.
	if err := os.Rename(data, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, "mysql")); serr == nil {
			return final, nil
		}
		return "", fmt.Errorf("MariaDB template: %w", err)
	}
	return final, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

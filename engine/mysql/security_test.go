package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

func secRandom(t *testing.T, what string) string {
	t.Helper()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return what + "-" + hex.EncodeToString(b[:])
}

// secLock migrates and then takes and gives back one exclusive lease on an
// engine opened on dsn, returning the first error, which must come before
// the context ends and hold neither the DSN nor any of secrets.
func secLock(t *testing.T, dsn string, secrets ...string) error {
	t.Helper()
	e, err := Open(dsn, WithTable("cerberus_sec"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err = func() error {
		if err := e.Migrate(ctx); err != nil {
			return err
		}
		l, err := e.Acquire(ctx, engine.Request{Key: "sec/tls", Mode: engine.Exclusive, TTL: 5 * time.Second, Renew: true, Wait: true})
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}()
	if err != nil {
		if ctx.Err() != nil {
			t.Fatalf("failed only when the context ended (%v): %v", time.Since(start), err)
		}
		for _, s := range append(secrets, dsn) {
			for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
				if strings.Contains(text, s) {
					t.Fatalf("the error holds the secret %q: %s", s, text)
				}
			}
		}
	}
	return err
}

// TestTLSRequired: a MariaDB user created REQUIRE SSL locks and unlocks
// through an engine whose DSN names a registered TLS configuration
// trusting the server's CA; without TLS, with a wrong password, or
// trusting another CA it is refused with a clear error that holds neither
// the password nor the DSN.
func TestTLSRequired(t *testing.T) {
	f := testenv.TLSFiles(t)
	m := testenv.StartMariaDB(t, "--ssl-cert="+f.CertFile, "--ssl-key="+f.KeyFile, "--ssl-ca="+f.CAFile)
	pw := secRandom(t, "mysql-pw")
	root, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{
		"CREATE USER 'locker'@'%' IDENTIFIED BY '" + pw + "' REQUIRE SSL",
		"GRANT ALL ON test.* TO 'locker'@'%'",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", strings.Replace(q, pw, "<pw>", 1), err)
		}
	}
	trusted, other := secRandom(t, "cerberus-test-tls"), secRandom(t, "cerberus-test-othertls")
	if err := mysqldrv.RegisterTLSConfig(trusted, f.ClientConfig()); err != nil {
		t.Fatal(err)
	}
	if err := mysqldrv.RegisterTLSConfig(other, testenv.TLSFiles(t).ClientConfig()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mysqldrv.DeregisterTLSConfig(trusted); mysqldrv.DeregisterTLSConfig(other) })
	dsn := func(password, tls string) string {
		d := "locker:" + password + "@tcp(" + m.Addr + ")/test"
		if tls != "" {
			d += "?tls=" + tls
		}
		return d
	}

	if err := secLock(t, dsn(pw, trusted), pw); err != nil {
		t.Fatalf("over TLS: %v", err)
	}
	// The session really is encrypted.
	db, err := sql.Open("mysql", dsn(pw, trusted))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name, cipher string
	if err := db.QueryRow("SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil || cipher == "" {
		t.Errorf("Ssl_cipher of the TLS session: %q, %v", cipher, err)
	}

	err = secLock(t, dsn(pw, ""), pw)
	if err == nil || !strings.Contains(err.Error(), "Access denied for user 'locker'") {
		t.Errorf("without TLS: want Access denied, got %v", err)
	} else {
		t.Logf("without TLS: %v", err)
	}
	wrong := secRandom(t, "wrong-pw")
	err = secLock(t, dsn(wrong, trusted), pw, wrong)
	if err == nil || !strings.Contains(err.Error(), "Access denied for user 'locker'") {
		t.Errorf("wrong password: want Access denied, got %v", err)
	} else {
		t.Logf("wrong password: %v", err)
	}
	err = secLock(t, dsn(pw, other), pw)
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("trusting another CA: want an unknown-authority error, got %v", err)
	} else {
		t.Logf("trusting another CA: %v", err)
	}
	if err != nil && errors.Is(err, engine.ErrNotAcquired) {
		t.Errorf("a refused connection reads as a held lock: %v", err)
	}
}

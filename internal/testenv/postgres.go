package testenv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
)

// PostgresDSNEnv names the variable PostgresDSN reads, as printed by
// `scripts/services.sh env`.
const PostgresDSNEnv = "CERBERUS_POSTGRES_DSN"

// DefaultPostgresDSN is the pgx DSN used when PostgresDSNEnv is unset: user
// postgres (trust authentication on loopback), database test, no TLS.
const DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// PostgresDSN returns the pgx DSN (a postgres:// URL or a libpq key=value
// string) of the PostgreSQL server for tests, from CERBERUS_POSTGRES_DSN
// (default DefaultPostgresDSN). It fails t unless the server at the DSN's
// host and port answers an SSLRequest as PostgreSQL does (a single 'S' or
// 'N'). Credentials and the database are not checked here.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	Needs(t, "PostgreSQL")
	dsn := fromEnv(PostgresDSNEnv, DefaultPostgresDSN)
	addr, err := postgresAddr(dsn)
	if err != nil {
		t.Fatalf("testenv: %s: %v", PostgresDSNEnv, err)
		return ""
	}
	if err := check("PostgreSQL", addr, probePostgres); err != nil {
		t.Fatalf("%s", failure("PostgreSQL", PostgresDSNEnv, addr, err))
		return ""
	}
	return dsn
}

// sslRequestCode is the protocol code of an SSLRequest message.
const sslRequestCode = 80877103

// probePostgres sends an SSLRequest, which every PostgreSQL server answers
// with one byte, 'S' (it would talk TLS) or 'N' (it would not), before any
// authentication. Nothing else is sent: the server then sees the
// connection close.
func probePostgres(conn net.Conn, _ string) error {
	var msg [8]byte
	binary.BigEndian.PutUint32(msg[0:4], 8)
	binary.BigEndian.PutUint32(msg[4:8], sslRequestCode)
	if _, err := conn.Write(msg[:]); err != nil {
		return fmt.Errorf("no PostgreSQL answer: %w", err)
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return fmt.Errorf("no PostgreSQL answer to an SSLRequest: %w", err)
	}
	switch b[0] {
	case 'S', 'N':
		return nil
	case 'E':
		return errors.New("PostgreSQL refused the connection with an error")
	default:
		return fmt.Errorf("no PostgreSQL answer to an SSLRequest: got byte %q", b[0])
	}
}

// postgresAddr extracts host:port from a postgres:// (or postgresql://)
// URL or a libpq key=value string, defaulting the port to 5432. Only the
// first host of a list is taken. A host that is a unix-socket directory is
// refused: the probe dials TCP. Errors never repeat the DSN, which may hold
// a password.
func postgresAddr(dsn string) (string, error) {
	host, port := "", ""
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("the DSN is not a valid URL")
		}
		hp := u.Host
		if i := strings.IndexByte(hp, ','); i >= 0 {
			hp = hp[:i]
		}
		if h, p, err := net.SplitHostPort(hp); err == nil {
			host, port = h, p
		} else {
			host = strings.Trim(hp, "[]")
		}
		if h := u.Query().Get("host"); host == "" && h != "" {
			host = h
		}
		if p := u.Query().Get("port"); port == "" && p != "" {
			port = p
		}
	} else {
		for _, f := range strings.Fields(dsn) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return "", errors.New("the DSN is neither a postgres:// URL nor key=value pairs")
			}
			switch k {
			case "host":
				host = v
			case "port":
				port = v
			}
		}
	}
	if i := strings.IndexByte(host, ','); i >= 0 {
		host = host[:i]
	}
	if i := strings.IndexByte(port, ','); i >= 0 {
		port = port[:i]
	}
	switch {
	case host == "":
		return "", errors.New("the DSN names no host; tests need a TCP address such as 127.0.0.1:5432")
	case strings.HasPrefix(host, "/"):
		return "", errors.New("the DSN names a unix socket; tests need a TCP address such as 127.0.0.1:5432")
	}
	if port == "" {
		port = "5432"
	}
	return net.JoinHostPort(host, port), nil
}

package testenv

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
)

func TestPostgresAddr(t *testing.T) {
	for dsn, want := range map[string]string{
		DefaultPostgresDSN:                                                   "127.0.0.1:5432",
		"postgresql://u:p@localhost/x":                                       "localhost:5432",
		"postgres://u@[::1]:5433/test":                                       "[::1]:5433",
		"postgres://u@127.0.0.1:5434,127.0.0.2:5435/t":                       "127.0.0.1:5434",
		"host=127.0.0.1 port=6543 user=postgres dbname=test password=secret": "127.0.0.1:6543",
		"host=localhost dbname=test":                                         "localhost:5432",
	} {
		got, err := postgresAddr(dsn)
		if err != nil || got != want {
			t.Errorf("postgresAddr(%q) = %q, %v; want %q", dsn, got, err, want)
		}
	}
	for _, dsn := range []string{"host=/run/postgresql dbname=test", "dbname=test", "postgres://u:secret@/test",
		"postgres://u:secret@%zz/test", "nonsense"} {
		_, err := postgresAddr(dsn)
		if err == nil {
			t.Errorf("postgresAddr(%q): want an error", dsn)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("postgresAddr(%q): the error shows the password: %v", dsn, err)
		}
	}
}

// fakePostgres answers an SSLRequest with answer.
func fakePostgres(t *testing.T, answer byte) string {
	return serve(t, func(c net.Conn) {
		var msg [8]byte
		if _, err := io.ReadFull(c, msg[:]); err != nil {
			return
		}
		if binary.BigEndian.Uint32(msg[4:]) != sslRequestCode {
			return
		}
		c.Write([]byte{answer})
	})
}

func TestPostgresDSN(t *testing.T) {
	unshort(t)
	addr := fakePostgres(t, 'N')
	dsn := "postgres://postgres@" + addr + "/test?sslmode=disable"
	t.Setenv(PostgresDSNEnv, dsn)
	if got := PostgresDSN(t); got != dsn {
		t.Fatalf("PostgresDSN = %q, want %q", got, dsn)
	}
}

func TestPostgresDSNRefusesOtherServers(t *testing.T) {
	unshort(t)
	addr := fakePostgres(t, '+')
	t.Setenv(PostgresDSNEnv, "postgres://postgres@"+addr+"/test")
	f := &fakeTB{TB: t}
	PostgresDSN(f)
	for _, want := range []string{"PostgreSQL", addr, PostgresDSNEnv, "scripts/services.sh up"} {
		if !strings.Contains(f.msg, want) {
			t.Errorf("failure message lacks %q:\n%s", want, f.msg)
		}
	}
}

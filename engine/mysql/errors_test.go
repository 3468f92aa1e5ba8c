package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestClassify: the driver's and the server's failures sorted by the rule
// of engine.ErrUnavailable. The conformance tests see 1045, 1142 and a
// refused connection from a real server, TestTooManyConnections 1040; the
// other numbers are hard to provoke on demand.
func TestClassify(t *testing.T) {
	e := &Engine{}
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	my := func(n uint16) error { return &mysqldrv.MySQLError{Number: n, Message: "m"} }
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want error // nil: neither mark
	}{
		{"too many connections", live, my(1040), engine.ErrUnavailable},
		{"shutdown", live, my(1053), engine.ErrUnavailable},
		{"bad connection", live, driver.ErrBadConn, engine.ErrUnavailable},
		{"invalid connection", live, mysqldrv.ErrInvalidConn, engine.ErrUnavailable},
		{"own statement timeout", live, context.DeadlineExceeded, engine.ErrUnavailable},
		{"access denied", live, my(1045), engine.ErrAccessDenied},
		{"no database rights", live, my(1044), engine.ErrAccessDenied},
		{"no table rights", live, my(1142), engine.ErrAccessDenied},
		{"missing table", live, my(1146), nil},
		{"gave up", live, fmt.Errorf("%w after 8 attempts", errGaveUp), nil},
		{"caller cancelled", cancelled, driver.ErrBadConn, nil},
		{"caller cancelled, denied", cancelled, my(1045), nil},
	}
	for _, c := range cases {
		got := e.opErr(c.ctx, "acquire", "k", c.err)
		for _, mark := range []error{engine.ErrUnavailable, engine.ErrAccessDenied} {
			if errors.Is(got, mark) != (mark == c.want) {
				t.Errorf("%s: %v: wraps %v is %v, want %v", c.name, got, mark, errors.Is(got, mark), mark == c.want)
			}
		}
	}
}

// TestTooManyConnections: a private server whose connections are all in
// use answers 1040, and the engine reports it as ErrUnavailable, not as a
// refusal: the server is healthy but cannot serve this client now.
func TestTooManyConnections(t *testing.T) {
	m := testenv.StartMariaDB(t, "--max-connections=10") // the least MariaDB takes
	const pw = "locker-pw-1040"
	root := rawDB(t, m.DSN)
	for _, q := range []string{
		"CREATE USER 'locker'@'%' IDENTIFIED BY '" + pw + "'",
		"GRANT ALL ON test.* TO 'locker'@'%'",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = root.Close()
	dsn := withUser(t, m.DSN, "locker", pw)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := rawDB(t, dsn)
	for range 10 {
		c, err := full.Conn(ctx)
		if err != nil {
			t.Fatalf("filling the server's connections: %v", err)
		}
		defer c.Close()
	}
	e, err := Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	err = e.Ping(ctx)
	if errNumber(err) != 1040 || !errors.Is(err, engine.ErrUnavailable) || errors.Is(err, engine.ErrAccessDenied) {
		t.Fatalf("Ping with every connection in use: want 1040 as ErrUnavailable, got %v", err)
	}
}

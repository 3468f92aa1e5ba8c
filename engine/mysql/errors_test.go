package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus/engine"
)

// TestClassify: the driver's and the server's failures sorted by the rule
// of engine.ErrUnavailable. The conformance tests see 1045, 1142 and a
// refused connection from a real server; the outage numbers below are
// hard to provoke on demand.
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

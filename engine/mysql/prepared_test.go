package mysql_test

import (
	"database/sql"
	"testing"

	"github.com/cerberus-go/cerberus/internal/testenv"
)

// globalStatus returns the server's status counter name, read as text (a
// query without arguments is not prepared).
func globalStatus(t *testing.T, db *sql.DB, name string) uint64 {
	t.Helper()
	var (
		v string
		n uint64
	)
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&v, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSessionConnsPrepared: on a private mariadbd, the session strategy's
// uncontended grants and releases, with holder records and without, are
// executions of statements that the shared connections prepared once (the
// server's Com_stmt_prepare and Com_stmt_execute), not statements sent as
// text; after the server restarts, which ends the sessions and their
// prepared statements, the new connections prepare them again.
func TestSessionConnsPrepared(t *testing.T) {
	srv := testenv.StartMariaDB(t)
	tables := tokenTables(t, srv.DSN)
	db, err := sql.Open("mysql", srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	status := func(name string) uint64 { return globalStatus(t, db, name) }
	const n = 50
	for _, v := range []variant{sessionVariant, clockVariant} {
		e := openOn(t, srv.DSN, tables[v.name], v)
		var last uint64
		for round, what := range []string{"first", "after a restart"} {
			if round == 1 {
				srv.Restart()
			}
			prepared, executed := status("Com_stmt_prepare"), status("Com_stmt_execute")
			last = cycles(t, e, "prepared", n, last)
			prepared, executed = status("Com_stmt_prepare")-prepared, status("Com_stmt_execute")-executed
			// A grant and a release per shared connection, of which an
			// engine dials two at most (WithSessionConns' default).
			if prepared < 2 || prepared > 4 || executed < 2*n {
				t.Errorf("%s, %s: %d grants and releases prepared %d statements and executed %d; want 2-4 "+
					"prepared, at least %d executed", v.name, what, n, prepared, executed, 2*n)
			}
		}
	}
}

// TestSessionConnsUnprepared: a private mariadbd that refuses to prepare
// statements (--max-prepared-stmt-count=0) still grants and releases on
// the shared connections, which send the statements as text instead, with
// tokens that increase; none of them is executed prepared.
func TestSessionConnsUnprepared(t *testing.T) {
	srv := testenv.StartMariaDB(t, "--max-prepared-stmt-count=0")
	tables := tokenTables(t, srv.DSN)
	db, err := sql.Open("mysql", srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	executed := func() uint64 { return globalStatus(t, db, "Com_stmt_execute") }
	for _, v := range []variant{sessionVariant, clockVariant} {
		e := openOn(t, srv.DSN, tables[v.name], v)
		before := executed()
		cycles(t, e, "unprepared", 20, 0)
		if n := executed() - before; n != 0 {
			t.Errorf("%s: %d statements executed prepared on a server that prepares none", v.name, n)
		}
	}
}

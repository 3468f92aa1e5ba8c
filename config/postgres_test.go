package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/postgres"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestPostgresInvalid: every bad postgres setting is reported before any
// I/O.
func TestPostgresInvalid(t *testing.T) {
	const dsn = "dsn: 'postgres://u@127.0.0.1:5432/test'"
	for _, tc := range []struct{ name, yaml, want string }{
		{"no dsn", "engines: [{name: e, kind: postgres}]", "engines[0].dsn: required for kind postgres"},
		{"bad dsn", "engines: [{name: e, kind: postgres, dsn: 'postgres://u@127.0.0.1:99999999/x'}]",
			"engines[0].dsn: does not parse"},
		{"addrs", "engines: [{name: e, kind: postgres, " + dsn + ", addrs: ['127.0.0.1:5432']}]",
			"engines[0].addrs: not used by kind postgres"},
		{"strategy", "engines: [{name: e, kind: postgres, " + dsn + ", strategy: row}]",
			`engines[0].strategy: unknown strategy "row" (want "session" or "lease")`},
		{"table", "engines: [{name: e, kind: postgres, " + dsn + ", table: 'Locks;drop'}]",
			"engines[0].table:"},
		{"tls twice", "engines: [{name: e, kind: postgres, dsn: 'postgres://u@127.0.0.1/test?sslmode=require', tls: {}}]",
			"engines[0].tls: the dsn already sets sslmode"},
		{"holder_records with the lease strategy", "engines: [{name: e, kind: postgres, " + dsn +
			", strategy: lease, holder_records: false}]",
			"engines[0].holder_records: only the session strategy has it"},
		{"holder_records on mysql's lease strategy", "engines: [{name: e, kind: mysql, " +
			"dsn: 'root@tcp(127.0.0.1:3306)/test', holder_records: false}]",
			`engines[0].holder_records: applies to strategy "session" only`},
		{"holder_records on redis", "engines: [{name: e, kind: redis, addrs: ['127.0.0.1:6379'], " +
			"holder_records: false}]", "engines[0].holder_records: not used by kind redis"},
		{"tiny pool", "engines: [{name: e, kind: postgres, " + dsn + ", max_conns: 2}]",
			"engines[0].max_conns: must be at least 4 for kind postgres"},
		{"pool under session_conns", "engines: [{name: e, kind: postgres, " + dsn + ", session_conns: 8, max_conns: 9}]",
			"engines[0].max_conns: must be at least 10 for kind postgres (session_conns 8, plus 2), got 9"},
		{"negative session_conns", "engines: [{name: e, kind: postgres, " + dsn + ", session_conns: -1}]",
			"engines[0].session_conns: must not be negative"},
		{"mysql's session_conns without the session strategy", "engines: [{name: e, kind: mysql, " +
			"dsn: 'root@tcp(127.0.0.1:3306)/test', session_conns: 2}]",
			`engines[0].session_conns: applies to strategy "session" only`},
		{"mysql's pool under session_conns", "engines: [{name: e, kind: mysql, " +
			"dsn: 'root@tcp(127.0.0.1:3306)/test', strategy: session, session_conns: 4, max_conns: 6}]",
			"engines[0].max_conns: must be at least 7 for kind mysql, strategy session (session_conns 4, plus 3), got 6"},
		{"mysql's pool under the default session_conns", "engines: [{name: e, kind: mysql, " +
			"dsn: 'root@tcp(127.0.0.1:3306)/test', strategy: session, max_conns: 4}]",
			"engines[0].max_conns: must be at least 5 for kind mysql, strategy session (session_conns 2, plus 3), got 4"},
		{"mysql's negative session_conns", "engines: [{name: e, kind: mysql, " +
			"dsn: 'root@tcp(127.0.0.1:3306)/test', strategy: session, session_conns: -1}]",
			"engines[0].session_conns: must not be negative"},
		{"consul's settings", "engines: [{name: e, kind: postgres, " + dsn + ", token: t}]",
			"engines[0].token: not used by kind postgres"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "yaml")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want ErrInvalid with %q, got %v", tc.want, err)
			}
		})
	}
}

// TestRedactPostgresDSN: both forms of a connection string lose their
// password and keep the rest.
func TestRedactPostgresDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://locker:s3cr%40t@db:5432/locks?sslmode=disable",
			"postgres://locker:<redacted>@db:5432/locks?sslmode=disable"},
		{"postgresql://locker@db/locks?password=s3cret", "postgresql://locker@db/locks?password=<redacted>"},
		{"postgres://locker@db/locks", "postgres://locker@db/locks"},
		{"host=db user=locker password=s3cret dbname=locks", "host=db user=locker password=<redacted> dbname=locks"},
		{"host=db password='a s3cret' dbname=locks", "host=db password=<redacted> dbname=locks"},
		{"postgres://%zz", redacted},
	} {
		if got := RedactPostgresDSN(tc.dsn); got != tc.want {
			t.Errorf("RedactPostgresDSN(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
		if strings.Contains(RedactPostgresDSN(tc.dsn), "s3cr") {
			t.Errorf("RedactPostgresDSN(%q) shows the password", tc.dsn)
		}
	}
}

// TestPostgresPasswordNeverPrinted: a password in the DSN or from a file
// shows neither in the configuration's text nor in a failed Build against
// a port where nothing listens.
func TestPostgresPasswordNeverPrinted(t *testing.T) {
	const inDSN, inFile = "pg-dsn-pw-Q7x", "pg-file-pw-K2m"
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte(inFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := testenv.FreePort(t)
	for _, yaml := range []string{
		fmt.Sprintf("engines: [{name: e, kind: postgres, dsn: 'postgres://locker:%s@127.0.0.1:%d/test?connect_timeout=2'}]",
			inDSN, port),
		fmt.Sprintf("engines: [{name: e, kind: postgres, dsn: 'host=127.0.0.1 port=%d user=locker password=%s dbname=test connect_timeout=2'}]",
			port, inDSN),
		fmt.Sprintf("engines: [{name: e, kind: postgres, dsn: 'postgres://locker@127.0.0.1:%d/test?connect_timeout=2', password_file: %s}]",
			port, pw),
	} {
		cfg, err := Parse([]byte(yaml), "yaml")
		if err != nil {
			t.Fatal(err)
		}
		for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
			if s := fmt.Sprintf(verb, cfg); strings.Contains(s, inDSN) || strings.Contains(s, inFile) {
				t.Errorf("Sprintf(%s) shows the password: %s", verb, s)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		built, err := cfg.Build(ctx)
		cancel()
		if err == nil {
			for _, n := range built {
				_ = n.Engine.Close()
			}
			t.Fatalf("Build with nothing listening (it migrates): want an error")
		}
		if strings.Contains(err.Error(), inDSN) || strings.Contains(err.Error(), inFile) {
			t.Errorf("Build's error shows the password: %v", err)
		}
	}
}

// TestPostgresBuild builds a postgres engine of each strategy from
// configuration, takes a lock on the test server, and checks that the
// password key replaces the DSN's.
func TestPostgresBuild(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	for _, c := range []struct{ strategy, records string }{{"session", ""}, {"lease", ""}, {"session", "false"}} {
		strategy, name, extra := c.strategy, c.strategy, ""
		if c.records != "" {
			name, extra = strategy+"_records_"+c.records, ", holder_records: "+c.records
		}
		t.Run(name, func(t *testing.T) {
			table := fmt.Sprintf("cfg_pg_%s_%d", name, time.Now().UnixNano()%1e9)
			dropPostgresTables(t, dsn, table)
			cfg, err := Parse([]byte(fmt.Sprintf(`engines:
  - {name: pg, kind: postgres, dsn: %q, strategy: %s, table: %s, max_conns: 8%s}
`, dsn, strategy, table, extra)), "yaml")
			if err != nil {
				t.Fatal(err)
			}
			built, err := cfg.Build(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			eng := built[0].Engine
			defer eng.Close()
			if eng.Name() != "postgres" {
				t.Errorf("Name = %q", eng.Name())
			}
			var pg *postgres.Engine
			if w, ok := eng.(engine.Wrapper); ok {
				pg, _ = w.Unwrap().(*postgres.Engine)
			}
			if pg == nil || string(pg.Strategy()) != strategy {
				t.Fatalf("built %T, want a *postgres.Engine of strategy %s", eng, strategy)
			}
			if want := c.records != "false"; pg.HolderRecords() != want {
				t.Errorf("HolderRecords = %v, want %v", pg.HolderRecords(), want)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			l, err := eng.Acquire(ctx, engine.Request{Key: "cfg", TTL: 5 * time.Second, Renew: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := eng.Acquire(ctx, engine.Request{Key: "cfg", TTL: 5 * time.Second}); !errors.Is(err,
				engine.ErrNotAcquired) {
				t.Errorf("second Acquire of a held key: want ErrNotAcquired, got %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("password replaces the DSN's", func(t *testing.T) {
		// Trust authentication takes any password, so a wrong one in the
		// DSN proves nothing; the user is what the server checks: the
		// username key replaces the DSN's unknown user.
		pc, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		c := pc.ConnConfig
		bad := fmt.Sprintf("postgres://nobody-here@%s:%d/%s?sslmode=disable", c.Host, c.Port, c.Database)
		table := fmt.Sprintf("cfg_pg_user_%d", time.Now().UnixNano()%1e9)
		dropPostgresTables(t, dsn, table)
		cfg, err := Parse([]byte(fmt.Sprintf(`engines:
  - {name: pg, kind: postgres, dsn: %q, username: %s, password: whatever, table: %s}
`, bad, c.User, table)), "yaml")
		if err != nil {
			t.Fatal(err)
		}
		built, err := cfg.Build(t.Context())
		if err != nil {
			t.Fatalf("Build with username postgres over a DSN of an unknown user: %v", err)
		}
		_ = built[0].Engine.Close()
	})
}

// dropPostgresTables drops, at the test's end, every table whose name
// starts with prefix: the lock table and the ones the engine made beside it.
func dropPostgresTables(t *testing.T, dsn, prefix string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("dropping the test's tables: %v", err)
			return
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()
			AND starts_with(tablename, $1)`, prefix)
		if err != nil {
			t.Errorf("dropping the test's tables: %v", err)
			return
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("dropping the test's tables: %v", err)
			return
		}
		for _, n := range names {
			if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize()); err != nil {
				t.Errorf("drop %s: %v", n, err)
			}
		}
	})
}

// TestPostgresTLS: a private PostgreSQL that takes TLS only, with a
// client certificate its CA signed: the engine reaches it through the tls
// section with that certificate, and is refused without it or without
// TLS.
func TestPostgresTLS(t *testing.T) {
	f := testenv.TLSFiles(t)
	srv := testenv.StartPostgresTLS(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lock := func(dsn, tlsSection string) error {
		cfg, err := Parse([]byte(fmt.Sprintf(`engines:
  - {name: pg, kind: postgres, dsn: %q, table: cfg_pg_tls%s}
`, dsn, tlsSection)), "yaml")
		if err != nil {
			t.Fatal(err)
		}
		built, err := cfg.Build(ctx)
		if err != nil {
			return err
		}
		defer built[0].Engine.Close()
		l, err := built[0].Engine.Acquire(ctx, engine.Request{Key: t.Name(), TTL: time.Minute, Renew: true})
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	dsn := "postgres://postgres@" + srv.Addr + "/test?connect_timeout=5"
	if err := lock(dsn, fmt.Sprintf(", tls: {ca_file: %q, cert_file: %q, key_file: %q}", f.CAFile,
		f.ClientCertFile, f.ClientKeyFile)); err != nil {
		t.Errorf("with the client certificate: %v", err)
	}
	if err := lock(dsn, fmt.Sprintf(", tls: {ca_file: %q}", f.CAFile)); err == nil {
		t.Errorf("without the client certificate the server should refuse the engine")
	}
	if err := lock(dsn+"&sslmode=disable", ""); err == nil {
		t.Errorf("without TLS the server should refuse the engine")
	}
	other := testenv.TLSFiles(t) // a CA that did not sign the server's certificate
	if err := lock(dsn, fmt.Sprintf(", tls: {ca_file: %q, cert_file: %q, key_file: %q}", other.CAFile,
		f.ClientCertFile, f.ClientKeyFile)); err == nil {
		t.Errorf("trusting another CA the engine should refuse the server")
	}
}

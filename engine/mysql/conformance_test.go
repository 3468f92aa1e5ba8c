package mysql

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
)

// unreachableDSN points at a loopback port nothing listens on.
const unreachableDSN = "root:secret@tcp(127.0.0.1:1)/test"

func TestConformanceLease(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	wrong := withUser(t, dsn, "", "wrong-password")
	enginetest.Run(t, func() (engine.Engine, error) {
		return Open(dsn, WithTable(table))
	}, enginetest.Options{
		Leftovers: heldLease(db, table),
		Unreachable: func() (engine.Engine, error) {
			return Open(unreachableDSN, WithTable(table))
		},
		// The server refuses the login (1045).
		AccessDenied: func() (engine.Engine, error) {
			return Open(wrong, WithTable(table))
		},
	})
}

func TestConformanceRow(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	grantless := grantlessDSN(t, dsn, table)
	enginetest.Run(t, func() (engine.Engine, error) {
		return Open(dsn, WithTable(table), WithStrategy(StrategyRow))
	}, enginetest.Options{
		Leftovers: heldRow(db, table),
		Unreachable: func() (engine.Engine, error) {
			return Open(unreachableDSN, WithTable(table), WithStrategy(StrategyRow))
		},
		// The server accepts the login but refuses the lock table (1142).
		AccessDenied: func() (engine.Engine, error) {
			return Open(grantless, WithTable(table), WithStrategy(StrategyRow))
		},
	})
}

func TestConformanceSession(t *testing.T) {
	dsn := testDSN(t)
	table := testTable(t, dsn)
	db := rawDB(t, dsn)
	grantless := grantlessDSN(t, dsn, table)
	enginetest.Run(t, func() (engine.Engine, error) {
		return Open(dsn, WithTable(table), WithStrategy(StrategySession))
	}, enginetest.Options{
		Leftovers: heldSession(db, table),
		Unreachable: func() (engine.Engine, error) {
			return Open(unreachableDSN, WithTable(table), WithStrategy(StrategySession))
		},
		// The server accepts the login but refuses the grant procedure
		// (1370).
		AccessDenied: func() (engine.Engine, error) {
			return Open(grantless, WithTable(table), WithStrategy(StrategySession))
		},
	})
}

// withUser returns dsn with its user (unless empty) and password replaced.
func withUser(t *testing.T, dsn, user, password string) string {
	t.Helper()
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("dsn: %v", err)
	}
	if user != "" {
		cfg.User = user
	}
	cfg.Passwd = password
	return cfg.FormatDSN()
}

// grantlessDSN creates a user that may log in to dsn's database, holding a
// right on table's fences table only, so every statement on table itself
// is refused; it is dropped when the test ends.
func grantlessDSN(t *testing.T, dsn, table string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	user, pw := "cerberus_ng_"+hex.EncodeToString(b[:]), hex.EncodeToString(b[:])+"-pw"
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("dsn: %v", err)
	}
	db := rawDB(t, dsn)
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + pw + "'",
		"GRANT SELECT ON `" + cfg.DBName + "`.`" + table + "_fences` TO '" + user + "'@'%'",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP USER '" + user + "'@'%'") })
	return withUser(t, dsn, user, pw)
}

// TestCloseTellsFirst: a closing engine tells its holders before their
// keys are free, in both strategies.
func TestCloseTellsFirst(t *testing.T) {
	dsn := testDSN(t)
	for _, s := range []Strategy{StrategyLease, StrategyRow} {
		t.Run(string(s), func(t *testing.T) {
			table := testTable(t, dsn)
			enginetest.RunCloseTellsFirst(t, func() (engine.Engine, error) {
				return Open(dsn, WithTable(table), WithStrategy(s))
			})
		})
	}
}

package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/postgres"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// postgresSetup returns the test server's DSN and a lock table unique to
// this run, migrated now for both strategies and dropped afterwards.
func postgresSetup(b *testing.B) (dsn, table string) {
	b.Helper()
	dsn = testenv.PostgresDSN(b)
	var r [5]byte
	_, _ = rand.Read(r[:])
	table = "cerberus_bench_" + hex.EncodeToString(r[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range []postgres.Strategy{postgres.StrategySession, postgres.StrategyLease} {
		e, err := postgres.Open(dsn, postgres.WithTable(table), postgres.WithStrategy(s))
		if err != nil {
			b.Fatal(err)
		}
		err = e.Migrate(ctx)
		_ = e.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()
			AND starts_with(tablename, $1)`, table)
		if err != nil {
			return
		}
		names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, n := range names {
			_, _ = conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize())
		}
	})
	return dsn, table
}

// postgresLibraries: cerberus on each strategy, and the server's own
// advisory lock (pg_advisory_lock/pg_advisory_unlock on one connection,
// the key hashed to 64 bits), which queues waiters inside the server: the
// baseline of issue 18; with a durable token bump (advisory+bump), and
// with a token that needs no flush (advisory+clock): the floors.
func postgresLibraries(dsn, table string) []locker {
	cerb := func(strategy postgres.Strategy, opts ...postgres.Option) func(b testing.TB, key string) LockFunc {
		return func(b testing.TB, key string) LockFunc {
			e, err := postgres.Open(dsn, append([]postgres.Option{postgres.WithTable(table),
				postgres.WithStrategy(strategy), postgres.WithMaxConns(4)}, opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			c, err := cerberus.New(e)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close(); _ = e.Close() })
			return func(ctx context.Context) (func() error, error) {
				l, err := c.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Unlock(context.Background()) }, nil
			}
		}
	}
	return []locker{
		{"cerberus-session", cerb(postgres.StrategySession)},
		{"cerberus-session-clock", cerb(postgres.StrategySession, postgres.WithHolderRecords(false))},
		{"cerberus-lease", cerb(postgres.StrategyLease)},
		{"advisory", advisory(dsn, table, bumpNone)},
		{"advisory+bump", advisory(dsn, table, bumpDurable)},
		{"advisory+clock", advisory(dsn, table, bumpClock)},
		{"advisory+clock-unlogged", advisory(dsn, table, bumpClockUnlogged)},
		{"advisory+clock-read", advisory(dsn, table, bumpClockRead)},
		{"advisory+sequence", advisory(dsn, table, bumpSequence)},
	}
}

// bump is what the advisory baseline does for a token.
type bump int

const (
	bumpNone    bump = iota // no token
	bumpDurable             // a counter bump after the lock, in a statement of its own, committed durably
	bumpClock               // the lock and max(counter+1, clock) in one statement, no WAL flush
	// bumpClockUnlogged is bumpClock on an UNLOGGED counter table: no WAL
	// at all (a crash empties the table, and the clock carries the token).
	bumpClockUnlogged
	// bumpClockRead is the lock and a read of the clock in one statement,
	// with no write: no token rule (a clock stepped back gives a smaller
	// one), what a write per grant costs beside it.
	bumpClockRead
	// bumpSequence is the lock and greatest(nextval of an UNLOGGED
	// sequence, clock) in one statement: a counter with no write
	// transaction (an unlogged sequence logs nothing and takes no
	// transaction id), which a crash resets and the clock then carries.
	bumpSequence
)

// advisory is the baseline: pg_advisory_lock and pg_advisory_unlock on one
// connection of its own, the key hashed to 64 bits. With bumpDurable, each
// grant also bumps a counter row in one autocommit statement, as a durable
// fencing token needs: the floor of any lock with a durable token on
// PostgreSQL. With bumpClock, the lock statement itself sets the counter
// to max(counter + 1, the server's clock) with synchronous_commit off, the
// session strategy's token rule: the floor of any fenced lock whose token
// needs no flush (one round trip and one write per grant).
func advisory(dsn, table string, kind bump) func(b testing.TB, key string) LockFunc {
	return func(b testing.TB, key string) LockFunc {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close(context.Background()) })
		h := fnv.New64a()
		_, _ = h.Write([]byte(table + "/" + key))
		id := int64(h.Sum64())
		counters, create := pgx.Identifier{table + "_bench_bump"}.Sanitize(), "CREATE TABLE IF NOT EXISTS "
		if kind == bumpClockUnlogged {
			counters, create = pgx.Identifier{table + "_bench_bumpu"}.Sanitize(), "CREATE UNLOGGED TABLE IF NOT EXISTS "
		}
		if kind == bumpSequence {
			counters = pgx.Identifier{table + "_bench_seq"}.Sanitize()
			if _, err := conn.Exec(context.Background(), "CREATE UNLOGGED SEQUENCE IF NOT EXISTS "+counters); err != nil {
				b.Fatal(err)
			}
		}
		if kind != bumpNone && kind != bumpClockRead && kind != bumpSequence {
			if _, err := conn.Exec(context.Background(), create+counters+
				" (k bigint PRIMARY KEY, n bigint NOT NULL)"); err != nil {
				b.Fatal(err)
			}
		}
		lock := "SELECT pg_advisory_lock($1)"
		if kind == bumpClockRead {
			lock = "SELECT ((extract(epoch FROM clock_timestamp()) * 1000000)::bigint - 1735689600000000) / 8 " +
				"FROM pg_advisory_lock($1::bigint)"
		}
		if kind == bumpSequence {
			lock = "SELECT greatest(nextval('" + counters + "'), ((extract(epoch FROM clock_timestamp()) * 1000000)::bigint - " +
				"1735689600000000) / 8) FROM pg_advisory_lock($1::bigint)"
		}
		if kind == bumpClock || kind == bumpClockUnlogged {
			lock = "WITH l AS MATERIALIZED (SELECT true AS ok FROM pg_advisory_lock($1::bigint)), " +
				"s AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true), " +
				"((extract(epoch FROM clock_timestamp()) * 1000000)::bigint - 1735689600000000) / 8 AS c FROM l) " +
				"INSERT INTO " + counters + " AS f (k, n) SELECT $1, greatest(1, s.c) FROM s " +
				"ON CONFLICT (k) DO UPDATE SET n = greatest(f.n + 1, excluded.n) RETURNING n"
		}
		return func(ctx context.Context) (func() error, error) {
			if _, err := conn.Exec(ctx, lock, id); err != nil {
				return nil, err
			}
			if kind == bumpDurable {
				var n int64
				if err := conn.QueryRow(ctx, "INSERT INTO "+counters+" (k, n) VALUES ($1, 1) ON CONFLICT (k) "+
					"DO UPDATE SET n = "+counters+".n + 1 RETURNING n", id).Scan(&n); err != nil {
					_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", id)
					return nil, err
				}
			}
			return func() error {
				var ok bool
				if err := conn.QueryRow(context.Background(), "SELECT pg_advisory_unlock($1)", id).Scan(&ok); err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("pg_advisory_unlock(%d) = false", id)
				}
				return nil
			}, nil
		}
	}
}

// BenchmarkPostgresUncontended: one client, lock+unlock cycles on one key,
// in rounds of fresh clients (roundsRates). advisory#2 is a second bare
// advisory client: its ratio to advisory is the resolution of the run.
func BenchmarkPostgresUncontended(b *testing.B) {
	once(b, func() {
		dsn, table := postgresSetup(b)
		rates := roundsRates(b, "postgres/", func(tb testing.TB) []Cycle {
			return roundClients(tb, "postgres/", "advisory", postgresLibraries(dsn, table))
		})
		Ratio(out, "postgres_uncontended_cycles", "advisory#2", "advisory", rates["advisory#2"], rates["advisory"])
		Ratio(out, "postgres_uncontended_cycles", "cerberus-session", "advisory", rates["cerberus-session"], rates["advisory"])
		Ratio(out, "postgres_uncontended_cycles", "cerberus-session-clock", "advisory", rates["cerberus-session-clock"], rates["advisory"])
		Ratio(out, "postgres_uncontended_cycles", "cerberus-session-clock", "advisory+clock-read", rates["cerberus-session-clock"], rates["advisory+clock-read"])
		Ratio(out, "postgres_uncontended_cycles", "cerberus-session", "advisory+bump", rates["cerberus-session"], rates["advisory+bump"])
		Ratio(out, "postgres_uncontended_cycles", "cerberus-session", "advisory+clock", rates["cerberus-session"], rates["advisory+clock"])
		Ratio(out, "postgres_uncontended_cycles", "advisory+clock", "advisory", rates["advisory+clock"], rates["advisory"])
		Ratio(out, "postgres_uncontended_cycles", "advisory+clock-unlogged", "advisory", rates["advisory+clock-unlogged"], rates["advisory"])
		Ratio(out, "postgres_uncontended_cycles", "advisory+clock-read", "advisory", rates["advisory+clock-read"], rates["advisory"])
		Ratio(out, "postgres_uncontended_cycles", "advisory+sequence", "advisory", rates["advisory+sequence"], rates["advisory"])
		Ratio(out, "postgres_uncontended_cycles", "cerberus-lease", "advisory", rates["cerberus-lease"], rates["advisory"])
	})
}

// BenchmarkPostgresHotKey: 16 clients on one key, 1 ms critical section,
// the libraries interleaved in rounds. advisory+bump is left out: every
// client holds a connection for the whole run, and five libraries' 80
// connections do not fit beside other users of a server with the default
// max_connections (100); advisory+clock is the floor that bounds the
// session strategy now.
func BenchmarkPostgresHotKey(b *testing.B) {
	once(b, func() {
		dsn, table := postgresSetup(b)
		var libs []locker
		for _, l := range postgresLibraries(dsn, table) {
			if l.name != "advisory+bump" && l.name != "advisory+clock-unlogged" && l.name != "advisory+clock-read" &&
				l.name != "advisory+sequence" && l.name != "cerberus-session-clock" {
				libs = append(libs, l)
			}
		}
		names := make([]string, len(libs))
		for i, l := range libs {
			names[i] = l.name
		}
		// Interleaved rounds, so that the machine's load weighs on every
		// library alike.
		by := hotKeyBy("postgres/", names, func(i int) LockFunc { return libs[i].build(b, "hot/"+libs[i].name) })
		Ratio(out, "postgres_hotkey_acq", "cerberus-session", "advisory", by["cerberus-session"].Rate(), by["advisory"].Rate())
		Ratio(out, "postgres_hotkey_wait_p99", "cerberus-session", "advisory", float64(by["cerberus-session"].WaitP99), float64(by["advisory"].WaitP99))
		Ratio(out, "postgres_hotkey_acq", "cerberus-session", "advisory+clock", by["cerberus-session"].Rate(), by["advisory+clock"].Rate())
		Ratio(out, "postgres_hotkey_wait_p99", "cerberus-session", "advisory+clock", float64(by["cerberus-session"].WaitP99), float64(by["advisory+clock"].WaitP99))
		Ratio(out, "postgres_hotkey_wait_p99", "advisory+clock", "advisory", float64(by["advisory+clock"].WaitP99), float64(by["advisory"].WaitP99))
		Ratio(out, "postgres_hotkey_acq", "cerberus-lease", "advisory", by["cerberus-lease"].Rate(), by["advisory"].Rate())
		Ratio(out, "postgres_hotkey_wait_p99", "cerberus-lease", "advisory", float64(by["cerberus-lease"].WaitP99), float64(by["advisory"].WaitP99))
	})
}

// BenchmarkPostgresHotKeyClock: the hot key of BenchmarkPostgresHotKey for
// the session strategy without holder records, interleaved in rounds with
// the bare advisory lock and its floor (the lock and a clock read): a run
// of its own, as its 16 clients' connections do not fit beside the other
// benchmark's libraries on a server with the default max_connections.
func BenchmarkPostgresHotKeyClock(b *testing.B) {
	once(b, func() {
		dsn, table := postgresSetup(b)
		var libs []locker
		for _, l := range postgresLibraries(dsn, table) {
			if l.name == "cerberus-session-clock" || l.name == "advisory" || l.name == "advisory+clock-read" {
				libs = append(libs, l)
			}
		}
		names := make([]string, len(libs))
		for i, l := range libs {
			names[i] = l.name
		}
		// Interleaved rounds, so that the machine's load weighs on every
		// library alike.
		by := hotKeyBy("postgres/", names, func(i int) LockFunc { return libs[i].build(b, "hotclock/"+libs[i].name) })
		Ratio(out, "postgres_hotkey_acq", "cerberus-session-clock", "advisory", by["cerberus-session-clock"].Rate(), by["advisory"].Rate())
		Ratio(out, "postgres_hotkey_wait_p99", "cerberus-session-clock", "advisory", float64(by["cerberus-session-clock"].WaitP99), float64(by["advisory"].WaitP99))
		Ratio(out, "postgres_hotkey_wait_p99", "advisory+clock-read", "advisory", float64(by["advisory+clock-read"].WaitP99), float64(by["advisory"].WaitP99))
	})
}

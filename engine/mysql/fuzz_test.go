package mysql

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
)

// keyColumn matches the declaration of the key column in the schema.
var keyColumn = regexp.MustCompile("`lock_key` VARBINARY\\((\\d+)\\) NOT NULL")

// FuzzValidateKey: the engine stores a key as given, with no encoding: it
// is bound as a statement parameter into the VARBINARY lock_key column,
// which keeps its bytes exactly (a byte-for-byte primary key). What is
// pure, and fuzzed here, is the check before any I/O: Validate accepts
// exactly the keys engine.CheckKey accepts with MaxKeyLen, refuses the
// others with an error wrapping engine.ErrInvalidKey that says why, and
// every key it accepts fits the key column of every table that holds keys,
// as the schema declares it, so the server never truncates or refuses one.
// The round trip through a server is the conformance suite's job.
func FuzzValidateKey(f *testing.F) {
	widths := keyColumn.FindAllStringSubmatch(strings.Join(schema(DefaultTable), "\n"), -1)
	if len(widths) < 2 {
		f.Fatalf("the schema declares %d key columns, want one per table that holds keys (lock table, readers, ...)", len(widths))
	}
	width := MaxKeyLen
	for _, w := range widths {
		n, err := strconv.Atoi(w[1])
		if err != nil {
			f.Fatal(err)
		}
		width = min(width, n)
	}
	for _, seed := range []string{"a", "", "A", "a ", "order:42", "订单", "a\x00b", "\xff", "'; DROP TABLE x; --", "\\", "%_"} {
		f.Add(seed)
	}
	e := &Engine{}
	if e.Limits().MaxKeyLen != MaxKeyLen {
		f.Fatalf("Limits().MaxKeyLen = %d, want MaxKeyLen (%d)", e.Limits().MaxKeyLen, MaxKeyLen)
	}
	f.Fuzz(func(t *testing.T, key string) {
		want := engine.CheckKey(key, MaxKeyLen)
		for _, mode := range []engine.Mode{engine.Exclusive, engine.Shared} {
			err := e.Validate(engine.Request{Key: key, Mode: mode, TTL: engine.MinTTL, Renew: true})
			switch {
			case want == nil && err != nil:
				t.Fatalf("Validate(%q, %v) = %v, want nil", key, mode, err)
			case want != nil && (err == nil || err.Error() != want.Error() || !errors.Is(err, engine.ErrInvalidKey)):
				t.Fatalf("Validate(%q, %v) = %v, want CheckKey's %v", key, mode, err, want)
			}
		}
		if want == nil && len(key) > width {
			t.Fatalf("Validate accepts the %d-byte key %q; the key column holds %d bytes", len(key), key, width)
		}
	})
}

// FuzzTableName: the table name is the one piece of input the engine
// writes into SQL text, inside backquotes. Whatever WithTable and
// WithStrategy are given, building the configuration never panics; it
// accepts exactly 1 to 48 ASCII letters, digits and underscores and the two
// strategy names, and refuses anything else with an error wrapping
// engine.ErrInvalidRequest that names the setting. An accepted name never
// holds a backquote, so every statement keeps it a single identifier, and
// with its suffixes it stays within MySQL's 64-character limit.
func FuzzTableName(f *testing.F) {
	for _, seed := range [][2]string{
		{DefaultTable, string(StrategyLease)}, {"t", string(StrategyRow)}, {"", string(StrategyLease)}, {strings.Repeat("x", 48), ""},
		{strings.Repeat("x", 49), string(StrategyRow)}, {"a`b", string(StrategyLease)}, {"locks; DROP TABLE x", string(StrategyLease)},
		{"café", string(StrategyLease)}, {"a.b", string(StrategyLease)}, {DefaultTable, "LEASE"}, {DefaultTable, "rows"},
	} {
		f.Add(seed[0], seed[1])
	}
	tableOK := regexp.MustCompile(`^[A-Za-z0-9_]{1,48}$`)
	f.Fuzz(func(t *testing.T, table, strategy string) {
		cfg, err := buildConfig([]Option{WithTable(table), WithStrategy(Strategy(strategy))})
		wantTable := tableOK.MatchString(table)
		wantStrategy := Strategy(strategy) == StrategyLease || Strategy(strategy) == StrategyRow
		if err != nil {
			if !errors.Is(err, engine.ErrInvalidRequest) {
				t.Fatalf("table %q, strategy %q: %v does not wrap ErrInvalidRequest", table, strategy, err)
			}
			switch msg := err.Error(); {
			case !wantTable && !strings.Contains(msg, "table name"):
				t.Fatalf("table %q: %q does not name the table", table, msg)
			case wantTable && !wantStrategy && !strings.Contains(msg, "unknown strategy"):
				t.Fatalf("strategy %q: %q does not name the strategy", strategy, msg)
			case wantTable && wantStrategy:
				t.Fatalf("table %q, strategy %q: refused with %v", table, strategy, err)
			}
			return
		}
		if !wantTable || !wantStrategy {
			t.Fatalf("table %q, strategy %q: accepted", table, strategy)
		}
		if cfg.table != table || cfg.strategy != Strategy(strategy) {
			t.Fatalf("table %q, strategy %q: configured as %q, %q", table, strategy, cfg.table, cfg.strategy)
		}
		if strings.ContainsRune(table, '`') || len(table+"_readers") > 64 {
			t.Fatalf("accepted table %q cannot be quoted as one identifier", table)
		}
		for _, stmt := range schema(table) {
			if !strings.Contains(stmt, "`"+table) {
				t.Fatalf("table %q is not quoted in %q", table, stmt)
			}
		}
	})
}

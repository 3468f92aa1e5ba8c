package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Secret values used below; none may ever be printed.
const (
	secInline = "inline-pw-Q7x"
	secFile   = "file-pw-K2m"
	secEnv    = "env-token-Z9v"
	secDSN    = "dsn-pw-W4r"
	secBadDSN = "baddsn-pw-J3k"
	secMap    = "map-pw-H8d"
)

var allSecrets = []string{secInline, secFile, secEnv, secDSN, secBadDSN, secMap}

func assertNoSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, sec := range allSecrets {
		if strings.Contains(s, sec) {
			t.Errorf("%s contains the secret %q:\n%s", what, sec, s)
		}
	}
}

func secretConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(secFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CERBERUS_TEST_SECRET_TOKEN", secEnv)
	return fmt.Sprintf(`engines:
  - {name: a, kind: redis, addrs: ["127.0.0.1:6379"], password: %s}
  - {name: b, kind: redlock, addrs: ["127.0.0.1:6391", "127.0.0.1:6392", "127.0.0.1:6393"], password_file: %s}
  - {name: c, kind: consul, addrs: ["127.0.0.1:8500"], token_env: CERBERUS_TEST_SECRET_TOKEN}
  - {name: d, kind: mysql, dsn: "locker:%s@tcp(127.0.0.1:3306)/locks?parseTime=true"}
`, secInline, pwFile, secDSN)
}

func TestSecretsNeverPrinted(t *testing.T) {
	src := secretConfig(t)
	cfg, err := Parse([]byte(src), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The secrets were resolved: the test would be empty otherwise.
	if cfg.Engines[0].RedisPassword() != secInline || cfg.Engines[1].RedisPassword() != secFile ||
		cfg.Engines[2].ConsulToken() != secEnv || !strings.Contains(cfg.Engines[3].DSN, secDSN) {
		t.Fatalf("secrets not resolved: %q %q %q", cfg.Engines[0].RedisPassword(), cfg.Engines[1].RedisPassword(), cfg.Engines[2].ConsulToken())
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		assertNoSecret(t, "Sprintf("+verb+", cfg)", fmt.Sprintf(verb, cfg))
		assertNoSecret(t, "Sprintf("+verb+", *cfg)", fmt.Sprintf(verb, *cfg))
		assertNoSecret(t, "Sprintf("+verb+", cfg.Engines)", fmt.Sprintf(verb, cfg.Engines))
		for i, e := range cfg.Engines {
			assertNoSecret(t, fmt.Sprintf("Sprintf(%s, engines[%d])", verb, i), fmt.Sprintf(verb, e))
			assertNoSecret(t, fmt.Sprintf("Sprintf(%s, &engines[%d])", verb, i), fmt.Sprintf(verb, &cfg.Engines[i]))
		}
	}
	s := cfg.String()
	for _, want := range []string{"password=\"<redacted>\"", "token=\"<redacted>\"", "locker:<redacted>@tcp(127.0.0.1:3306)/locks"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q: %s", want, s)
		}
	}
	for _, w := range cfg.Warnings() {
		assertNoSecret(t, "warning", w)
	}
}

func TestSecretsNotInErrors(t *testing.T) {
	src := secretConfig(t)
	for name, bad := range map[string]string{
		"validation": src + fmt.Sprintf(`  - {name: a, kind: redis, password: %s, password_env: HOME}
  - {name: e, kind: mysql, dsn: "u:%s@tcp(127.0.0.1:3306"}
health: {interval: -1s}
`, secInline, secBadDSN),
		"decode":  src + fmt.Sprintf("  - {name: f, kind: redis, addrs: ['127.0.0.1:1'], password: {p: %s}}\n", secMap),
		"syntax":  src + fmt.Sprintf("  - {name: g, kind: redis, password: '%s\n", secMap),
		"unknown": src + fmt.Sprintf("  - {name: h, kind: redis, addrs: ['127.0.0.1:1'], passwrd: %s}\n", secMap),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(src+"\n"), "yaml")
			if err != nil {
				t.Fatalf("the base config is invalid: %v", err)
			}
			_, err = Parse([]byte(bad), "yaml")
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			assertNoSecret(t, "error", err.Error())
			assertNoSecret(t, "error %+v", fmt.Sprintf("%+v", err))
		})
	}
}

// Build errors name the engine and never its DSN password: a mysql engine
// on a port nothing listens on fails in Migrate.
func TestSecretsNotInBuildErrors(t *testing.T) {
	cfg, err := Parse([]byte(fmt.Sprintf(`engines:
  - {name: m, kind: memory}
  - {name: db, kind: mysql, dsn: "locker:%s@tcp(127.0.0.1:1)/locks?timeout=2s"}
`, secDSN)), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	err = buildMustFail(t, cfg, "a closed port")
	if !strings.HasPrefix(err.Error(), "engines[1] (db): ") {
		t.Errorf("error does not name the engine: %v", err)
	}
	assertNoSecret(t, "Build error", err.Error())
}

package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const consulTokenEnv = "CERBERUS_TEST_CONSUL_TOKEN"

// wantFull is what testdata/full.{yaml,toml,json} load to.
func wantFull() *Config {
	zero, starve := time.Duration(0), 5*time.Millisecond
	return &Config{
		Engines: []EngineSpec{
			{Name: "primary", Kind: KindRedis, Addrs: []string{"127.0.0.1:6379"},
				PasswordFile: "testdata/redis.pass", Prefix: "app:", Fair: true, Starvation: &starve, MaxConns: 20,
				password: "s3cr3t-from-file"},
			{Name: "cluster", Kind: KindRedisCluster, Addrs: []string{"127.0.0.1:7001", "127.0.0.1:7002"}},
			{Name: "red-lock", Kind: KindRedlock, Addrs: []string{"127.0.0.1:6391", "127.0.0.1:6392", "127.0.0.1:6393"},
				Password: "inline-redis-pw", password: "inline-redis-pw"},
			{Name: "zk", Kind: KindZooKeeper, Addrs: []string{"127.0.0.1:2181"},
				SessionTimeout: 6 * time.Second, Prefix: "/app/locks"},
			{Name: "consul-1", Kind: KindConsul, Addrs: []string{"127.0.0.1:8500"},
				TokenEnv: consulTokenEnv, Datacenter: "dc1", SessionTTL: 20 * time.Second,
				LockDelay: &zero, Prefix: "app/locks", MaxConns: 8, token: "tok-from-env"},
			{Name: "db", Kind: KindMySQL, DSN: "locker:dbpw-secret@tcp(127.0.0.1:3306)/locks?parseTime=true",
				Strategy: "row", Table: "app_locks", MaxConns: 10},
			{Name: "mem", Kind: KindMemory},
		},
		Active:        "zk",
		Health:        Health{Interval: 2 * time.Second, Threshold: 5},
		Auto:          true,
		Failback:      FailbackAuto,
		SingleProcess: true,
		Fence:         false,
		Lease:         LeaseDefaults{TTL: 40 * time.Second, Watchdog: 45 * time.Second, HoldLimit: 2 * time.Minute},
	}
}

func TestFixturesLoadEqual(t *testing.T) {
	t.Setenv(consulTokenEnv, "tok-from-env")
	want := wantFull()
	for _, name := range []string{"full.yaml", "full.toml", "full.json"} {
		t.Run(name, func(t *testing.T) {
			got, err := Load(filepath.Join("testdata", name))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Load(%s) =\n%s\nwant\n%s", name, got, want)
			}
			if got.Engines[0].RedisPassword() != "s3cr3t-from-file" {
				t.Errorf("RedisPassword = %q", got.Engines[0].RedisPassword())
			}
			if got.Engines[4].ConsulToken() != "tok-from-env" {
				t.Errorf("ConsulToken = %q", got.Engines[4].ConsulToken())
			}
			if w := got.Warnings(); len(w) != 0 {
				t.Errorf("Warnings = %q, want none", w)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	got, err := Load("testdata/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Engines:  []EngineSpec{{Name: "mem", Kind: KindMemory}},
		Health:   Health{Interval: time.Second, Threshold: 3},
		Failback: FailbackOff,
		Fence:    true,
		Lease:    LeaseDefaults{Watchdog: 30 * time.Second},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

// A health section that sets one key keeps the default of the other.
func TestPartialSectionKeepsDefaults(t *testing.T) {
	got, err := Parse([]byte("engines: [{name: m, kind: memory}]\nhealth: {threshold: 7}\n"), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got.Health != (Health{Interval: time.Second, Threshold: 7}) {
		t.Fatalf("Health = %+v", got.Health)
	}
}

const mem = "engines: [{name: m, kind: memory}]\n"

func TestInvalid(t *testing.T) {
	t.Setenv("CERBERUS_TEST_EMPTY", "")
	for _, tc := range []struct {
		name string
		yaml string
		want []string // each a line of the error, by prefix
	}{
		{"unknown kind", "engines: [{name: a, kind: redys, addrs: ['127.0.0.1:1']}]",
			[]string{`engines[0].kind: unknown kind "redys" (want one of memory, redis, redis-cluster, redlock, zookeeper, consul, mysql, etcd, postgres)`}},
		{"missing kind", "engines: [{name: a}]", []string{"engines[0].kind: required"}},
		{"missing addrs", "engines: [{name: a, kind: memory}, {name: b, kind: redis}]",
			[]string{"engines[1].addrs: required for kind redis"}},
		{"addrs on memory", "engines: [{name: a, kind: memory, addrs: ['127.0.0.1:1']}]",
			[]string{"engines[0].addrs: not used by kind memory"}},
		{"two addrs for redis", "engines: [{name: a, kind: redis, addrs: ['127.0.0.1:1', '127.0.0.1:2']}]",
			[]string{"engines[0].addrs: kind redis takes exactly one address, got 2"}},
		{"redlock too few", "engines: [{name: a, kind: redlock, addrs: ['127.0.0.1:1', '127.0.0.1:2']}]",
			[]string{"engines[0].addrs: kind redlock needs at least 3"}},
		{"bad addrs", "engines: [{name: a, kind: zookeeper, addrs: [':2181', '127.0.0.1:0', '127.0.0.1:99999', 'nohost', '127.0.0.1:x', '127.0.0.1:2181', '127.0.0.1:2181']}]",
			[]string{`engines[0].addrs[0]: ":2181" has an empty host`,
				`engines[0].addrs[1]: "127.0.0.1:0" has a bad port`,
				`engines[0].addrs[2]: "127.0.0.1:99999" has a bad port`,
				`engines[0].addrs[3]: "nohost" is not host:port`,
				`engines[0].addrs[4]: "127.0.0.1:x" has a bad port`,
				`engines[0].addrs[6]: duplicate of engines[0].addrs[5]`}},
		{"negative durations", mem + "health: {interval: -1s, threshold: 0}\nlease: {ttl: -5s, watchdog: 0s, hold_limit: -1s}",
			[]string{"health.interval: must be positive, got -1s", "health.threshold: must be at least 1, got 0",
				"lease.ttl: must be 0 (renewed leases) or within [10ms, 168h0m0s], got -5s",
				"lease.watchdog: must be within [10ms, 168h0m0s], got 0s",
				"lease.hold_limit: must be 0 (no limit) or within [10ms, 168h0m0s], got -1s"}},
		{"hold limit out of range", mem + "lease: {hold_limit: 1ms}",
			[]string{"lease.hold_limit: must be 0 (no limit) or within [10ms, 168h0m0s], got 1ms"}},
		{"negative engine durations", "engines: [{name: z, kind: zookeeper, addrs: ['127.0.0.1:2181'], session_timeout: -1s}, {name: c, kind: consul, addrs: ['127.0.0.1:8500'], session_ttl: 1s, lock_delay: -1s}]",
			[]string{"engines[0].session_timeout: must be positive, got -1s",
				"engines[1].session_ttl: must be within [10s, 24h0m0s], got 1s",
				"engines[1].lock_delay: must be within [0s, 1m0s], got -1s"}},
		{"starvation out of range", "engines: [{name: r, kind: redis, addrs: ['127.0.0.1:6379'], starvation: -1ms}, {name: c, kind: consul, addrs: ['127.0.0.1:8500'], starvation: 2m}]",
			[]string{"engines[0].starvation: must be within [0s, 1m0s], got -1ms",
				"engines[1].starvation: must be within [0s, 1m0s], got 2m0s"}},
		{"starvation on zookeeper", "engines: [{name: z, kind: zookeeper, addrs: ['127.0.0.1:2181'], starvation: 5ms}]",
			[]string{"engines[0].starvation: "}},
		{"numeric duration", mem + "health: {interval: 5}", []string{"health.interval: want a Go duration string"}},
		{"fractional max_conns", "engines: [{name: r, kind: redis, addrs: ['127.0.0.1:1'], max_conns: 12.7}]",
			[]string{"engines[0].max_conns: want a whole number, got 12.7"}},
		{"fractional threshold", mem + "health: {threshold: 3.5}", []string{"health.threshold: want a whole number, got 3.5"}},
		{"numeric lock delay", "engines: [{name: c, kind: consul, addrs: ['127.0.0.1:8500'], lock_delay: 5}]",
			[]string{"engines[0].lock_delay: want a Go duration string"}},
		{"bad duration", mem + "lease: {ttl: soon}", []string{`lease.ttl: `}},
		{"unknown top key", mem + "helth: {interval: 1s}", []string{"helth: unknown key"}},
		{"unknown nested key", "engines: [{name: m, kind: memory, adrs: ['127.0.0.1:1']}]\nhealth: {intervall: 1s}",
			[]string{"engines[0].adrs: unknown key", "health.intervall: unknown key"}},
		{"duplicate names", "engines: [{name: a, kind: memory}, {name: b, kind: memory}, {name: a, kind: memory}]",
			[]string{`engines[2].name: duplicate of engines[0].name ("a")`}},
		{"bad names", "engines: [{name: Primary, kind: memory}, {kind: memory}]",
			[]string{`engines[0].name: "Primary" must be made of`, "engines[1].name: required"}},
		{"two password sources", "engines: [{name: a, kind: redis, addrs: ['127.0.0.1:1'], password: x, password_env: HOME}]",
			[]string{"engines[0].password: set at most one of password, password_file and password_env (got password, password_env)"}},
		{"two token sources", "engines: [{name: a, kind: consul, addrs: ['127.0.0.1:1'], token_file: /nonexistent, token_env: HOME}]",
			[]string{"engines[0].token: set at most one of token, token_file and token_env (got token_file, token_env)"}},
		{"missing secret file", "engines: [{name: a, kind: redis, addrs: ['127.0.0.1:1'], password_file: testdata/nonexistent}]",
			[]string{"engines[0].password_file: open testdata/nonexistent: "}},
		{"empty secret env", "engines: [{name: a, kind: redis, addrs: ['127.0.0.1:1'], password_env: CERBERUS_TEST_EMPTY}]",
			[]string{"engines[0].password_env: environment variable CERBERUS_TEST_EMPTY is unset or empty"}},
		{"settings for another kind", "engines: [{name: a, kind: mysql, dsn: 'u@tcp(127.0.0.1:3306)/d', fair: true, token: t, addrs: ['127.0.0.1:1']}]",
			[]string{"engines[0].token: not used by kind mysql", "engines[0].fair: not used by kind mysql", "engines[0].addrs: not used by kind mysql"}},
		{"mysql settings", "engines: [{name: a, kind: mysql, strategy: rows, table: 'bad-name', max_conns: 2}, {name: b, kind: mysql}]",
			[]string{"engines[0].dsn: required for kind mysql", `engines[0].strategy: unknown strategy "rows"`, `engines[0].table: "bad-name" must be`,
				"engines[0].max_conns: must be at least 3 for kind mysql, got 2", "engines[1].dsn: required for kind mysql"}},
		{"prefixes", "engines: [{name: r, kind: redis, addrs: ['127.0.0.1:1'], prefix: 'a{b'}, {name: z, kind: zookeeper, addrs: ['127.0.0.1:2'], prefix: 'rel/path'}, {name: c, kind: consul, addrs: ['127.0.0.1:3'], prefix: '/abs'}]",
			[]string{`engines[0].prefix: "a{b" must not contain`, `engines[1].prefix: "rel/path" must be an absolute`, `engines[2].prefix: "/abs" must be`}},
		{"zookeeper digest", "engines: [{name: a, kind: zookeeper, addrs: ['127.0.0.1:1'], username: u}, {name: b, kind: zookeeper, addrs: ['127.0.0.1:2'], password: p}, {name: c, kind: zookeeper, addrs: ['127.0.0.1:3'], username: 'a:b', password: p}, {name: d, kind: consul, addrs: ['127.0.0.1:4'], username: u}]",
			[]string{"engines[0].username: needs password, password_file or password_env",
				"engines[1].password: a ZooKeeper digest needs a username too",
				`engines[2].username: "a:b" must not contain ':'`,
				"engines[3].username: not used by kind consul"}},
		{"failback", mem + "failback: sometimes", []string{`failback: unknown mode "sometimes"`}},
		{"no engines", "auto: true\nsingle_process: true", []string{"engines: at least one engine is required"}},
		{"auto alone", mem + "auto: true", []string{"auto: true without engine_key lets each process switch engines alone"}},
		{"below consul's floor", "engines: [{name: c, kind: consul, addrs: ['127.0.0.1:8500']}]\nlease: {watchdog: 1s}",
			[]string{"lease.watchdog: 1s is below engines[0] (c)'s floor of 30s (2 x session_ttl 10s + lock_delay 10s)"}},
		{"below a tuned consul's floor", "engines: [{name: c, kind: consul, addrs: ['127.0.0.1:8500'], session_ttl: 10s, lock_delay: 0s}]\nlease: {ttl: 19s}",
			[]string{"lease.ttl: 19s is below engines[0] (c)'s floor of 20s"}},
		{"fleet settings", mem + "single_process: true\nengine_key: {consul: '127.0.0.1:8500', key: k, quorum: -1, member_ttl: 1s}",
			[]string{"engine_key.quorum: must be 0", "engine_key.member_ttl: must be within [10s, 1h]", "single_process: true contradicts engine_key"}},
		{"fleet settings without a key", mem + "engine_key: {quorum: 2, member_ttl: 20s}",
			[]string{"engine_key.quorum: set engine_key.consul", "engine_key.member_ttl: set engine_key.consul"}},
		{"wrong type", mem + "auto: [1]", []string{"auto: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.yaml), "yaml")
			if err == nil {
				t.Fatalf("Parse succeeded: %s", cfg)
			}
			if cfg != nil {
				t.Errorf("Parse returned a Config with its error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			lines := strings.Split(err.Error(), "\n")
			for _, w := range tc.want {
				if !hasLinePrefix(lines, w) {
					t.Errorf("no error line starts with %q; got:\n%v", w, err)
				}
			}
			if len(lines) != len(tc.want) {
				t.Errorf("got %d problems, want %d:\n%v", len(lines), len(tc.want), err)
			}
		})
	}
}

func hasLinePrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func TestFormats(t *testing.T) {
	if _, err := Load("testdata/config.ini"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `unsupported extension ".ini"`) {
		t.Errorf("Load(.ini) = %v", err)
	}
	if _, err := Parse([]byte(mem), "xml"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Parse(xml) = %v", err)
	}
	if _, err := Parse([]byte("engines: [\n"), "yaml"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Parse(broken yaml) = %v", err)
	}
	if _, err := Load("testdata/nonexistent.yaml"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
}

func TestEnvOverride(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(mem+"engine: m\nhealth: {interval: 2s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"CERBERUS_ENGINE":           "other",
		"CERBERUS_AUTO":             "true",
		"CERBERUS_SINGLE_PROCESS":   "true",
		"CERBERUS_FAILBACK":         "auto",
		"CERBERUS_FENCE":            "false",
		"CERBERUS_HEALTH_INTERVAL":  "250ms",
		"CERBERUS_HEALTH_THRESHOLD": "9",
		"CERBERUS_LEASE_TTL":        "3s",
		"CERBERUS_LEASE_WATCHDOG":   "1m",
		"CERBERUS_LEASE_HOLD_LIMIT": "90s",
	} {
		t.Setenv(k, v)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Engines: []EngineSpec{{Name: "m", Kind: KindMemory}},
		Active:  "other", Auto: true, SingleProcess: true, Failback: FailbackAuto, Fence: false,
		Health: Health{Interval: 250 * time.Millisecond, Threshold: 9},
		Lease:  LeaseDefaults{TTL: 3 * time.Second, Watchdog: time.Minute, HoldLimit: 90 * time.Second},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Load with env =\n%s\nwant\n%s", got, want)
	}
	// The override names no engine: valid, but reported.
	if w := got.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], `engine: "other" names no configured engine`) {
		t.Errorf("Warnings = %q", w)
	}

	// Parse ignores the environment.
	p, err := Parse([]byte(mem), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Active != "" || p.Health.Interval != time.Second || !p.Fence {
		t.Errorf("Parse applied the environment: %s", p)
	}

	// A bad value from the environment is reported under its key.
	t.Setenv("CERBERUS_HEALTH_INTERVAL", "-3s")
	if _, err := Load(path); err == nil || !strings.HasPrefix(err.Error(), "health.interval: must be positive, got -3s") {
		t.Errorf("Load with a bad env value = %v", err)
	}
}

func TestWarnings(t *testing.T) {
	cfg, err := Parse([]byte(mem+"engine: m\nfailback: auto\n"), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], "failback:") {
		t.Errorf("Warnings = %q", w)
	}
	if cfg.Find("m") == nil || cfg.Find("x") != nil {
		t.Errorf("Find is wrong")
	}
	// Lease periods a silent holder outlasts on ZooKeeper or the MySQL
	// row strategy are accepted, and said.
	cfg, err = Parse([]byte(`engines:
  - {name: z, kind: zookeeper, addrs: ["127.0.0.1:2181"], session_timeout: 4s}
  - {name: r, kind: mysql, dsn: "u@tcp(127.0.0.1:3306)/d", strategy: row}
  - {name: s, kind: mysql, dsn: "u@tcp(127.0.0.1:3306)/d", strategy: session}
lease: {watchdog: 500ms}
`), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.Warnings()
	if len(w) != 3 || !strings.HasPrefix(w[0], "lease.watchdog: 500ms is below engines[0] (z)'s session timeout") || !strings.Contains(w[0], "within 6s") ||
		!strings.HasPrefix(w[1], "lease.watchdog: 500ms is below engines[1] (r)'s floor of 2s") ||
		!strings.HasPrefix(w[2], "lease.watchdog: 500ms is below engines[2] (s)'s floor of 2s") {
		t.Errorf("Warnings = %q", w)
	}
}

func TestRedactDSN(t *testing.T) {
	got := RedactDSN("user:pa55@tcp(127.0.0.1:3306)/db?parseTime=true")
	if strings.Contains(got, "pa55") || !strings.Contains(got, "user:<redacted>@tcp(127.0.0.1:3306)/db") {
		t.Errorf("RedactDSN = %q", got)
	}
	if got := RedactDSN("not a dsn pa55"); got != redacted {
		t.Errorf("RedactDSN(unparsable) = %q", got)
	}
}

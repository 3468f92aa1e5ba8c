package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/hashicorp/consul/api"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/engine/postgres"
)

var nameRE = regexp.MustCompile(`^[a-z0-9-]+$`)

// tableRE matches the names engine/mysql accepts.
var tableRE = regexp.MustCompile(`^[A-Za-z0-9_]{1,48}$`)

// consulPrefixRE matches the KV folders engine/consul accepts.
var consulPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`)

// Ranges enforced by the engines, checked here so that a bad file fails at
// load time rather than at Build.
const (
	consulMinSessionTTL = 10 * time.Second
	consulMaxSessionTTL = 24 * time.Hour
	etcdMinLeaseTTL     = time.Second
	etcdMaxLeaseTTL     = 24 * time.Hour
	consulMaxLockDelay  = 60 * time.Second
	maxStarvation       = time.Minute
	mysqlMinConns       = 3
)

// field is one optional engine setting and the kinds it applies to.
type field struct {
	key   string
	set   func(e *EngineSpec) bool
	kinds []string
}

var redisKinds = []string{KindRedis, KindRedisCluster, KindRedlock}

// passwordKinds take username and a password: Redis AUTH, ZooKeeper digest,
// etcd user.
var passwordKinds = append(slices.Clone(redisKinds), KindZooKeeper, KindEtcd, KindPostgres)

var fields = []field{
	{"dsn", func(e *EngineSpec) bool { return e.DSN != "" }, []string{KindMySQL, KindPostgres}},
	{"username", func(e *EngineSpec) bool { return e.Username != "" }, passwordKinds},
	{"password", func(e *EngineSpec) bool { return e.Password != "" }, passwordKinds},
	{"password_file", func(e *EngineSpec) bool { return e.PasswordFile != "" }, passwordKinds},
	{"password_env", func(e *EngineSpec) bool { return e.PasswordEnv != "" }, passwordKinds},
	{"token", func(e *EngineSpec) bool { return e.Token != "" }, []string{KindConsul}},
	{"token_file", func(e *EngineSpec) bool { return e.TokenFile != "" }, []string{KindConsul}},
	{"token_env", func(e *EngineSpec) bool { return e.TokenEnv != "" }, []string{KindConsul}},
	{"prefix", func(e *EngineSpec) bool { return e.Prefix != "" },
		[]string{KindRedis, KindRedisCluster, KindRedlock, KindZooKeeper, KindConsul, KindEtcd}},
	{"fair", func(e *EngineSpec) bool { return e.Fair },
		[]string{KindRedis, KindRedisCluster, KindConsul}},
	{"starvation", func(e *EngineSpec) bool { return e.Starvation != nil },
		[]string{KindRedis, KindRedisCluster, KindConsul}},
	{"strategy", func(e *EngineSpec) bool { return e.Strategy != "" }, []string{KindMySQL, KindPostgres}},
	{"table", func(e *EngineSpec) bool { return e.Table != "" }, []string{KindMySQL, KindPostgres}},
	{"session_timeout", func(e *EngineSpec) bool { return e.SessionTimeout != 0 },
		[]string{KindZooKeeper}},
	{"session_ttl", func(e *EngineSpec) bool { return e.SessionTTL != 0 }, []string{KindConsul, KindEtcd}},
	{"lock_delay", func(e *EngineSpec) bool { return e.LockDelay != nil }, []string{KindConsul}},
	{"datacenter", func(e *EngineSpec) bool { return e.Datacenter != "" }, []string{KindConsul}},
	{"max_conns", func(e *EngineSpec) bool { return e.MaxConns != 0 },
		[]string{KindRedis, KindRedisCluster, KindRedlock, KindConsul, KindMySQL, KindPostgres}},
	{"session_conns", func(e *EngineSpec) bool { return e.SessionConns != 0 }, []string{KindMySQL, KindPostgres}},
	{"holder_records", func(e *EngineSpec) bool { return e.HolderRecords != nil }, []string{KindMySQL, KindPostgres}},
	{"tls", func(e *EngineSpec) bool { return e.TLS != nil }, tlsKinds},
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validate returns one error per problem, each starting with its key path
// and wrapping ErrInvalid. It never quotes a secret.
func (c *Config) validate() []error {
	var errs []error
	if len(c.Engines) == 0 {
		errs = append(errs, invalidf("engines: at least one engine is required"))
	}
	errs = append(errs, c.validateEngineKey()...)
	errs = append(errs, c.validateEngines()...)
	errs = append(errs, c.validatePolicy()...)
	return append(errs, c.validateFloors()...)
}

// validateEngineKey checks engine_key, and the settings that need it or
// contradict it.
func (c *Config) validateEngineKey() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalidf(format, args...)) }
	if k := c.EngineKey; k.Set() {
		if err := checkAddr(k.Consul); err != nil {
			add("engine_key.consul: %v", err)
		}
		if k.Key == "" || strings.HasPrefix(k.Key, "/") {
			add("engine_key.key: %q must be a non-empty KV key without a leading '/'", k.Key)
		}
		errs = append(errs, k.TLS.validate("engine_key.tls")...)
		if k.Quorum < 0 {
			add("engine_key.quorum: must be 0 (a majority) or a number of processes, got %d", k.Quorum)
		}
		if k.MemberTTL != 0 && (k.MemberTTL < 10*time.Second || k.MemberTTL > time.Hour) {
			add("engine_key.member_ttl: must be within [10s, 1h] (Consul's session TTL range), got %v",
				k.MemberTTL)
		}
		if c.SingleProcess {
			add("single_process: true contradicts engine_key, which serves a fleet; remove one")
		}
	} else {
		if c.Auto && !c.SingleProcess {
			add("auto: true without engine_key lets each process switch engines alone, and two processes " +
				"on two engines grant the same key; " +
				"set engine_key so the fleet decides together, or single_process: true if one process only " +
				"uses this configuration")
		}
		for _, s := range []struct {
			key string
			set bool
		}{{"token", k.Token != ""}, {"token_file", k.TokenFile != ""}, {"token_env",
			k.TokenEnv != ""}, {"tls", k.TLS != nil},
			{"quorum", k.Quorum != 0}, {"member_ttl", k.MemberTTL != 0}} {
			if s.set {
				add("engine_key.%s: set engine_key.consul and engine_key.key too, or remove it", s.key)
			}
		}
	}
	return errs
}

// validateEngines checks each engine entry: a unique name, a known kind,
// and the settings of that kind.
func (c *Config) validateEngines() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalidf(format, args...)) }
	seen := make(map[string]int)
	for i := range c.Engines {
		e := &c.Engines[i]
		p := fmt.Sprintf("engines[%d]", i)
		switch {
		case e.Name == "":
			add("%s.name: required", p)
		case !nameRE.MatchString(e.Name):
			add("%s.name: %q must be made of lower-case letters, digits and '-'", p, e.Name)
		default:
			if j, dup := seen[e.Name]; dup {
				add("%s.name: duplicate of engines[%d].name (%q)", p, j, e.Name)
			} else {
				seen[e.Name] = i
			}
		}
		if !contains(Kinds, e.Kind) {
			if e.Kind == "" {
				add("%s.kind: required (want one of %s)", p, strings.Join(Kinds, ", "))
			} else {
				add("%s.kind: unknown kind %q (want one of %s)", p, e.Kind, strings.Join(Kinds, ", "))
			}
			continue // the rest depends on the kind
		}
		for _, f := range fields {
			if f.set(e) && !contains(f.kinds, e.Kind) {
				add("%s.%s: not used by kind %s", p, f.key, e.Kind)
			}
		}
		errs = append(errs, e.validateAddrs(p)...)
		errs = append(errs, e.validateKind(p)...)
		if contains(tlsKinds, e.Kind) {
			errs = append(errs, e.TLS.validate(p+".tls")...)
		}
	}
	return errs
}

// validatePolicy checks health, failback and lease defaults.
func (c *Config) validatePolicy() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalidf(format, args...)) }
	if c.Health.Interval <= 0 {
		add("health.interval: must be positive, got %v", c.Health.Interval)
	}
	if c.Health.Threshold < 1 {
		add("health.threshold: must be at least 1, got %d", c.Health.Threshold)
	}
	switch c.Failback {
	case FailbackOff, FailbackAuto:
	default:
		add("failback: unknown mode %q (want %q or %q)", c.Failback, FailbackOff, FailbackAuto)
	}
	if c.Lease.TTL != 0 && (c.Lease.TTL < engine.MinTTL || c.Lease.TTL > engine.MaxTTL) {
		add("lease.ttl: must be 0 (renewed leases) or within [%v, %v], got %v", engine.MinTTL,
			engine.MaxTTL, c.Lease.TTL)
	}
	if c.Lease.Watchdog < engine.MinTTL || c.Lease.Watchdog > engine.MaxTTL {
		add("lease.watchdog: must be within [%v, %v], got %v", engine.MinTTL, engine.MaxTTL,
			c.Lease.Watchdog)
	}
	if h := c.Lease.HoldLimit; h != 0 && (h < engine.MinTTL || h > engine.MaxTTL) {
		add("lease.hold_limit: must be 0 (no limit) or within [%v, %v], got %v", engine.MinTTL,
			engine.MaxTTL, h)
	}
	return errs
}

// leaseKey names the lease setting in force and its period.
func (c *Config) leaseKey() (string, time.Duration) {
	if c.Lease.TTL > 0 {
		return "lease.ttl", c.Lease.TTL
	}
	return "lease.watchdog", c.Lease.Watchdog
}

// validateFloors refuses a lease period below a consul engine's floor:
// a crashed or paused holder would keep its keys for the floor, not for the
// period asked.
func (c *Config) validateFloors() []error {
	var errs []error
	key, period := c.leaseKey()
	for i, e := range c.Engines {
		if e.Kind != KindConsul {
			continue
		}
		if floor := e.consulFloor(); period < floor {
			errs = append(errs, invalidf("%s: %v is below engines[%d] (%s)'s floor of %v (2 x session_ttl "+
				"%v + lock_delay %v): a crashed or paused holder keeps its keys that long; raise %s, or lower "+
				"session_ttl or lock_delay",
				key, period, i, e.Name, floor, e.sessionTTL(), e.lockDelay(), key))
		}
	}
	return errs
}

func (e *EngineSpec) sessionTTL() time.Duration {
	if e.SessionTTL > 0 {
		return e.SessionTTL
	}
	return consul.DefaultSessionTTL
}

func (e *EngineSpec) lockDelay() time.Duration {
	if e.LockDelay != nil {
		return *e.LockDelay
	}
	return consul.DefaultLockDelay
}

// consulFloor is a consul engine's floor (consul.Floor).
func (e *EngineSpec) consulFloor() time.Duration {
	return consul.Floor(e.sessionTTL(), e.lockDelay())
}

// validateAddrs checks the number and form of e.Addrs for its kind.
func (e *EngineSpec) validateAddrs(p string) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalidf(format, args...)) }
	n := len(e.Addrs)
	switch e.Kind {
	case KindMemory, KindMySQL, KindPostgres:
		if n > 0 {
			add("%s.addrs: not used by kind %s", p, e.Kind)
		}
		return errs
	case KindRedis, KindConsul:
		if n == 0 {
			add("%s.addrs: required for kind %s", p, e.Kind)
		} else if n > 1 {
			add("%s.addrs: kind %s takes exactly one address, got %d", p, e.Kind, n)
		}
	case KindRedlock:
		if n == 0 {
			add("%s.addrs: required for kind %s", p, e.Kind)
		} else if n < 3 {
			add("%s.addrs: kind redlock needs at least 3 independent masters, got %d", p, n)
		}
	default:
		if n == 0 {
			add("%s.addrs: required for kind %s", p, e.Kind)
		}
	}
	seen := make(map[string]int)
	for i, a := range e.Addrs {
		if err := checkAddr(a); err != nil {
			add("%s.addrs[%d]: %v", p, i, err)
			continue
		}
		if j, dup := seen[a]; dup {
			add("%s.addrs[%d]: duplicate of %s.addrs[%d]", p, i, p, j)
		}
		seen[a] = i
	}
	return errs
}

// checkAddr accepts host:port with a non-empty host and a port in 1-65535.
func checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port", a)
	}
	if host == "" {
		return fmt.Errorf("%q has an empty host", a)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q has a bad port (want 1-65535)", a)
	}
	return nil
}

// validateKind checks the settings specific to e's kind.
func (e *EngineSpec) validateKind(p string) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalidf(format, args...)) }
	if e.MaxConns < 0 {
		add("%s.max_conns: must not be negative, got %d", p, e.MaxConns)
	}
	if e.Starvation != nil && (*e.Starvation < 0 || *e.Starvation > maxStarvation) {
		add("%s.starvation: must be within [0s, %v], got %v", p, maxStarvation, *e.Starvation)
	}
	switch e.Kind {
	case KindRedis, KindRedisCluster, KindRedlock:
		if strings.ContainsAny(e.Prefix, "{}") {
			add("%s.prefix: %q must not contain '{' or '}'", p, e.Prefix)
		}
		if e.Username != "" && e.Password == "" && e.PasswordFile == "" && e.PasswordEnv == "" {
			add("%s.username: needs password, password_file or password_env", p)
		}
	case KindZooKeeper:
		errs = append(errs, e.validateZooKeeper(p)...)
	case KindConsul:
		if e.Prefix != "" && (!consulPrefixRE.MatchString(e.Prefix) || hasDotSegment(e.Prefix)) {
			add("%s.prefix: %q must be ASCII letters, digits, '-', '_', '.' in '/'-separated segments, "+
				"none empty, \".\" or \"..\"", p, e.Prefix)
		}
		if e.SessionTTL != 0 &&
			(e.SessionTTL < consulMinSessionTTL || e.SessionTTL > consulMaxSessionTTL) {
			add("%s.session_ttl: must be within [%v, %v], got %v", p, consulMinSessionTTL,
				consulMaxSessionTTL, e.SessionTTL)
		}
		if e.LockDelay != nil && (*e.LockDelay < 0 || *e.LockDelay > consulMaxLockDelay) {
			add("%s.lock_delay: must be within [0s, %v], got %v", p, consulMaxLockDelay, *e.LockDelay)
		}
	case KindMySQL:
		errs = append(errs, e.validateMySQL(p)...)
	case KindEtcd:
		errs = append(errs, e.validateEtcd(p)...)
	case KindPostgres:
		errs = append(errs, e.validatePostgres(p)...)
	}
	return errs
}

// validatePair checks that a username and a password (inline, file or
// environment) come together; what names the credential in the error.
func (e *EngineSpec) validatePair(p, what string) []error {
	hasPassword := e.Password != "" || e.PasswordFile != "" || e.PasswordEnv != ""
	switch {
	case e.Username != "" && !hasPassword:
		return []error{invalidf("%s.username: needs password, password_file or password_env", p)}
	case e.Username == "" && hasPassword:
		return []error{invalidf("%s.password: %s needs a username too", p, what)}
	}
	return nil
}

// validateEtcd checks the settings of an etcd entry.
func (e *EngineSpec) validateEtcd(p string) []error {
	errs := e.validatePair(p, "an etcd password")
	add := func(format string, args ...any) { errs = append(errs, invalidf(format, args...)) }
	if e.SessionTTL != 0 && (e.SessionTTL < etcdMinLeaseTTL || e.SessionTTL > etcdMaxLeaseTTL) {
		add("%s.session_ttl: the etcd lease TTL must be within [%v, %v], got %v", p, etcdMinLeaseTTL,
			etcdMaxLeaseTTL, e.SessionTTL)
	}
	if strings.ContainsFunc(e.Prefix, unicode.IsControl) {
		add("%s.prefix: %q must not contain control characters", p, e.Prefix)
	}
	return errs
}

// validateZooKeeper checks the settings of a zookeeper entry.
func (e *EngineSpec) validateZooKeeper(p string) []error {
	errs := e.validatePair(p, "a ZooKeeper digest")
	add := func(format string, args ...any) { errs = append(errs, invalidf(format, args...)) }
	if len(errs) == 0 && strings.Contains(e.Username, ":") {
		add("%s.username: %q must not contain ':' (the digest is user:password)", p, e.Username)
	}
	if e.SessionTimeout < 0 {
		add("%s.session_timeout: must be positive, got %v", p, e.SessionTimeout)
	}
	if e.Prefix != "" && (!strings.HasPrefix(e.Prefix, "/") || strings.HasSuffix(e.Prefix, "/") ||
		strings.Contains(e.Prefix, "//")) {
		add("%s.prefix: %q must be an absolute znode path without a trailing or doubled slash", p,
			e.Prefix)
	}
	return errs
}

// validateMySQL checks the settings of a mysql entry.
func (e *EngineSpec) validateMySQL(p string) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalidf(format, args...)) }
	if e.DSN == "" {
		add("%s.dsn: required for kind mysql", p)
	} else if _, err := mysqldrv.ParseDSN(e.DSN); err != nil {
		add("%s.dsn: does not parse: %s", p, scrub(err.Error(), []string{e.DSN, dsnPassword(e.DSN)}))
	}
	switch e.Strategy {
	case "", "lease", "row", "session":
	default:
		add("%s.strategy: unknown strategy %q (want \"lease\", \"row\" or \"session\")", p, e.Strategy)
	}
	if e.Table != "" && !tableRE.MatchString(e.Table) {
		add("%s.table: %q must be 1 to 48 ASCII letters, digits or underscores", p, e.Table)
	}
	if e.TLS != nil && e.DSN != "" {
		if dc, err := mysqldrv.ParseDSN(e.DSN); err == nil && dc.TLSConfig != "" {
			add("%s.tls: the dsn already sets tls=%s; configure TLS in one place (remove tls= from the dsn)",
				p, dc.TLSConfig)
		}
	}
	if e.MaxConns > 0 && e.MaxConns < mysqlMinConns {
		add("%s.max_conns: must be at least %d for kind mysql, got %d", p, mysqlMinConns, e.MaxConns)
	}
	sc := e.SessionConns
	switch {
	case sc < 0:
		add("%s.session_conns: must not be negative, got %d", p, sc)
	case sc > 0 && e.Strategy != "session":
		add("%s.session_conns: applies to strategy \"session\" only", p)
	}
	if e.HolderRecords != nil && e.Strategy != "session" {
		add("%s.holder_records: applies to strategy \"session\" only", p)
	}
	if sc <= 0 {
		sc = mysql.DefaultSessionConns
	}
	if e.Strategy == "session" && e.MaxConns > 0 && e.MaxConns < sc+3 {
		add("%s.max_conns: must be at least %d for kind mysql, strategy session (session_conns %d, plus 3), got %d",
			p, sc+3, sc, e.MaxConns)
	}
	return errs
}

// validatePostgres checks the settings of a postgres entry. The DSN is
// parsed by pgx, which reads no file and opens no connection here.
func (e *EngineSpec) validatePostgres(p string) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalidf(format, args...)) }
	if e.DSN == "" {
		add("%s.dsn: required for kind postgres", p)
	} else if _, err := pgxpool.ParseConfig(e.DSN); err != nil {
		add("%s.dsn: does not parse: %s", p, scrub(err.Error(), []string{e.DSN, dsnPassword(e.DSN), e.password}))
	}
	switch e.Strategy {
	case "", "session", "lease":
	default:
		add("%s.strategy: unknown strategy %q (want \"session\" or \"lease\")", p, e.Strategy)
	}
	if e.HolderRecords != nil && e.Strategy == "lease" {
		add("%s.holder_records: only the session strategy has it; the lease strategy keeps its rows", p)
	}
	if e.Table != "" && !pgTableRE.MatchString(e.Table) {
		add("%s.table: %q must be 1 to 48 lower-case ASCII letters, digits or underscores, not starting "+
			"with a digit", p, e.Table)
	}
	if e.TLS != nil && pgSetsSSLMode(e.DSN) {
		add("%s.tls: the dsn already sets sslmode; configure TLS in one place (remove sslmode from the dsn)", p)
	}
	sc := e.SessionConns
	if sc < 0 {
		add("%s.session_conns: must not be negative, got %d", p, sc)
	}
	if sc <= 0 {
		sc = postgres.DefaultSessionConns
	}
	if e.MaxConns > 0 && e.MaxConns < sc+2 {
		add("%s.max_conns: must be at least %d for kind postgres (session_conns %d, plus 2), got %d", p,
			sc+2, sc, e.MaxConns)
	}
	return errs
}

// pgTableRE matches the table names config accepts for postgres: unquoted
// identifiers that PostgreSQL does not fold.
var pgTableRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// pgSetsSSLMode reports whether a PostgreSQL connection string sets
// sslmode, as a URL parameter or a key=value pair.
func pgSetsSSLMode(dsn string) bool { return pgSSLModeRE.MatchString(dsn) }

var pgSSLModeRE = regexp.MustCompile(`(?i)(^|[\s?&])sslmode\s*=`)

func hasDotSegment(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if s == "." || s == ".." {
			return true
		}
	}
	return false
}

// tlsKinds are the kinds that take a tls section.
var tlsKinds = []string{KindRedis, KindRedisCluster, KindRedlock, KindConsul, KindMySQL, KindEtcd,
	KindPostgres}

// validate checks a tls section whose key path is p: the combination of
// settings, and that the files exist and hold what they should. A nil
// section (TLS off) is valid.
func (t *TLS) validate(p string) []error {
	if t == nil {
		return nil
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalidf(format, args...)) }
	if t.InsecureSkipVerify && (t.CAFile != "" || t.ServerName != "") {
		add("%s.insecure_skip_verify: turns off the server verification that ca_file and server_name "+
			"configure; set one or the other", p)
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		add("%s.key_file: required with cert_file (a client certificate needs its private key)", p)
	case t.CertFile == "" && t.KeyFile != "":
		add("%s.cert_file: required with key_file (a private key needs its client certificate)", p)
	case t.CertFile != "":
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			add("%s.cert_file: with key_file: %v", p, err)
		}
	}
	if t.CAFile != "" {
		if _, err := loadCAs(t.CAFile); err != nil {
			add("%s.ca_file: %v", p, err)
		}
	}
	return errs
}

// loadCAs reads a PEM file of CA certificates.
func loadCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// clientConfig builds the *tls.Config for t, reading its files again.
func (t *TLS) clientConfig() (*tls.Config, error) {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: t.ServerName,
		// The user's explicit choice; refused with ca_file or server_name.
		InsecureSkipVerify: t.InsecureSkipVerify,
	}
	if t.CAFile != "" {
		pool, err := loadCAs(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" {
		kp, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file: with key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c, nil
}

// consulConfig maps t onto the consul client's TLS settings, which name
// files that the client reads itself.
func (t *TLS) consulConfig() api.TLSConfig {
	return api.TLSConfig{
		Address:            t.ServerName,
		CAFile:             t.CAFile,
		CertFile:           t.CertFile,
		KeyFile:            t.KeyFile,
		InsecureSkipVerify: t.InsecureSkipVerify,
	}
}

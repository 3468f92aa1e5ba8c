package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/failover"
)

// ErrInvalid is wrapped by every error Load, Parse and Watch report for a
// configuration that cannot be read or does not validate.
var ErrInvalid = errors.New("config: invalid configuration")

// Engine kinds.
const (
	KindMemory       = "memory"        // in-process engine/memory
	KindRedis        = "redis"         // one Redis server
	KindRedisCluster = "redis-cluster" // Redis Cluster; addrs are seed nodes
	KindRedlock      = "redlock"       // Redlock over N independent Redis masters
	KindZooKeeper    = "zookeeper"     // a ZooKeeper ensemble
	KindConsul       = "consul"        // one Consul agent's HTTP API
	KindMySQL        = "mysql"         // MySQL or MariaDB, by DSN
	KindEtcd         = "etcd"          // an etcd cluster's client endpoints
	KindPostgres     = "postgres"      // PostgreSQL, by DSN
)

// Kinds lists every engine kind, in the order error messages name them.
var Kinds = []string{KindMemory, KindRedis, KindRedisCluster, KindRedlock, KindZooKeeper,
	KindConsul, KindMySQL, KindEtcd, KindPostgres}

// Failback modes.
const (
	FailbackOff  = "off"  // stay on the engine failover moved to
	FailbackAuto = "auto" // return to a preferred engine once it is healthy
)

// Defaults applied to keys the configuration leaves out. Those the root
// package also has are its own: one place sets each.
const (
	DefaultHealthInterval   = failover.DefaultInterval
	DefaultHealthThreshold  = failover.DefaultThreshold
	DefaultLeaseWatchdog    = cerberus.DefaultWatchdog
	DefaultFailback         = FailbackOff
	DefaultZKSessionTimeout = zookeeper.DefaultSessionTimeout
)

// Config is a loaded and validated configuration. Build one with Load or
// Parse; a Config built by hand has no resolved secrets.
type Config struct {
	// Engines lists the configured engines in priority order, primary
	// first.
	Engines []EngineSpec `mapstructure:"engines"`
	// Active pins the active engine by name (the YAML key engine).
	// Empty means the first healthy engine in order. A name that matches no
	// configured engine is not an error: the first healthy engine is used
	// and Warnings reports it. With EngineKey set it moves no process (the
	// key decides, an empty key meaning the first engine); PinWarning says
	// so. It is then only where a process starts when the key cannot be
	// read at its start.
	Active string `mapstructure:"engine"`
	// Health configures the health checks.
	Health Health `mapstructure:"health"`
	// Auto turns automatic failover on: after Health.Threshold failed checks
	// in a row the engine is down, and the manager moves to the next
	// healthy engine. With EngineKey set, that is a fleet decision: a
	// quorum of the fleet's live processes must see the engine down, and
	// every process moves together (see EngineKey). Without EngineKey each
	// process would decide alone, and two processes on two engines grant
	// the same key, so Auto needs SingleProcess then. The default is
	// false: only operators switch.
	Auto bool `mapstructure:"auto"`
	// SingleProcess declares that one process only uses this configuration,
	// which lets Auto work without EngineKey. With several processes and no
	// EngineKey, one that alone loses the primary moves alone, and from
	// then on two processes hold the same key on two engines (a test with
	// two processes measured over 3,700 overlapping critical sections in
	// 9s). It cannot be combined with EngineKey. The default is false.
	SingleProcess bool `mapstructure:"single_process"`
	// Failback is FailbackOff (the default) or FailbackAuto.
	Failback string `mapstructure:"failback"`
	// Fence delays the first grant on a new engine after a switch until
	// the old engine's leases must have expired: the longest lease period
	// granted before the switch, so with the default 30s watchdog, up to
	// 30s without grants after a switch. Shorter leases (lease.watchdog or
	// lease.ttl) shorten that gap. The default is true.
	Fence bool `mapstructure:"fence"`
	// Lease holds the lease defaults every Client of this configuration
	// uses.
	Lease LeaseDefaults `mapstructure:"lease"`
	// EngineKey, when set, is a Consul KV key that decides the active
	// engine for a whole fleet: every process that Opened the
	// configuration follows its value, which takes precedence over Active,
	// and registers itself under the key for the fleet view and the fleet's
	// automatic decisions. See EngineKey.
	EngineKey EngineKey `mapstructure:"engine_key"`
}

// Defaults of the engine key's fleet settings.
const (
	// DefaultMemberTTL is the Consul session TTL of a process's fleet
	// registration: a process that dies leaves the fleet view within
	// about this (Consul may take up to twice as long).
	DefaultMemberTTL = 10 * time.Second
)

// EngineKey names a Consul KV key holding the fleet's active engine.
//
// The key's value is JSON, {"engine": NAME, "epoch": N, "reason": ...},
// written with a check-and-set on its modify index by cerberusctl use,
// SetEngineKey and the fleet's automatic decisions. Every process follows
// it (failover.Manager.Follow): it moves to NAME and stamps its tokens
// with epoch N, so tokens stay ordered across the whole fleet. A value
// that is a bare engine name (written by hand) is followed too, with each
// process counting its own epoch. An empty or absent value means the
// first engine in order (never the file's engine setting, which moves no
// process under an engine key).
//
// Each process registers under "<key>/fleet/" (tied to a Consul session
// with MemberTTL, so a dead process drops out by itself) with its host,
// pid, active engine, epoch and the engines its health checks mark down.
//
// With auto on, a process that sees the fleet's engine down does not
// switch: it reports it, and the switch is written to the key only when
// at least Quorum of the live registered processes report it (default: a
// majority), to the first engine in order that as many see healthy. So
// one process that alone cannot reach the primary does not move the
// fleet; it stays on the primary, where its calls fail with
// ErrUnavailable, and its status (failover.Manager.Fleet, the handler's JSON, its
// logs) says it was outvoted. When the key's Consul cannot be reached, no
// automatic switch happens at all: every process stays where it is.
type EngineKey struct {
	// Consul is the agent's host:port.
	Consul string `mapstructure:"consul"`
	// Key is the KV key, such as "myapp/cerberus/engine".
	Key string `mapstructure:"key"`
	// Token is the Consul ACL token sent when reading (every process) and
	// writing (SetEngineKey) the key: it needs key "<key>" read, key_prefix
	// "<key>/fleet/" write and session write for the fleet registration,
	// and key "<key>" write for automatic decisions and whoever flips the
	// fleet. At most one of Token, TokenFile and
	// TokenEnv may be set; none means no token (the agent's anonymous
	// token). A consul engine's token is not used here, even for the same
	// agent: give the key a token of its own.
	Token string `mapstructure:"token"`
	// TokenFile names a file holding the engine key's ACL token.
	TokenFile string `mapstructure:"token_file"`
	// TokenEnv names an environment variable holding the engine key's ACL
	// token.
	TokenEnv string `mapstructure:"token_env"`
	// TLS, when set, makes the engine key's client talk HTTPS to the agent.
	TLS *TLS `mapstructure:"tls"`
	// Quorum is how many live registered processes must report the fleet's
	// engine down before auto moves the fleet (and report another engine
	// healthy before it is chosen). The default, 0, means a majority of
	// the live registered processes.
	Quorum int `mapstructure:"quorum"`
	// MemberTTL is the Consul session TTL of each process's registration,
	// within [10s, 1h]. The default is DefaultMemberTTL.
	MemberTTL time.Duration `mapstructure:"member_ttl"`

	token string // resolved token
}

// Set reports whether an engine key is configured.
func (k EngineKey) Set() bool { return k.Consul != "" || k.Key != "" }

// ConsulToken returns the engine key's ACL token resolved at load time from
// Token, TokenFile or TokenEnv, or "".
func (k *EngineKey) ConsulToken() string { return k.token }

// String describes the engine key without its token.
func (k EngineKey) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{consul: %q, key: %q", k.Consul, k.Key)
	if k.Token != "" || k.token != "" {
		fmt.Fprintf(&b, ", token: %q", redacted)
	}
	if k.TokenFile != "" {
		fmt.Fprintf(&b, ", token_file: %q", k.TokenFile)
	}
	if k.TokenEnv != "" {
		fmt.Fprintf(&b, ", token_env: %q", k.TokenEnv)
	}
	if k.TLS != nil {
		fmt.Fprintf(&b, ", tls: %s", k.TLS)
	}
	if k.Quorum != 0 {
		fmt.Fprintf(&b, ", quorum: %d", k.Quorum)
	}
	if k.MemberTTL != 0 {
		fmt.Fprintf(&b, ", member_ttl: %v", k.MemberTTL)
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String, so that %#v hides the token too.
func (k EngineKey) GoString() string { return k.String() }

// TLS configures TLS to a server: to the servers of a redis,
// redis-cluster, redlock, consul, mysql or etcd engine, or to the engine key's
// Consul agent. A tls section that is present turns TLS on, even empty
// ("tls: {}": the system's roots verify the server). File names are read
// at load time, to check them, and again by Build.
type TLS struct {
	// CAFile is a PEM file of the certificates that verify the server.
	// Empty means the system's roots.
	CAFile string `mapstructure:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and its private
	// key, for servers that require one (mutual TLS). Set both or neither.
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
	// ServerName is the name the server's certificate must hold. Empty
	// means the host of the address dialled.
	ServerName string `mapstructure:"server_name"`
	// InsecureSkipVerify accepts any server certificate: the connection is
	// encrypted but the server is not authenticated. For tests only; it
	// cannot be combined with CAFile or ServerName, which it would make
	// useless.
	InsecureSkipVerify bool `mapstructure:"insecure_skip_verify"`
}

// String describes the TLS settings (file names, not their contents).
func (t *TLS) String() string {
	if t == nil {
		return "off"
	}
	var parts []string
	for _, kv := range []struct{ k, v string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile},
		{"key_file", t.KeyFile}, {"server_name", t.ServerName}} {
		if kv.v != "" {
			parts = append(parts, fmt.Sprintf("%s: %q", kv.k, kv.v))
		}
	}
	if t.InsecureSkipVerify {
		parts = append(parts, "insecure_skip_verify: true")
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Health configures the health checks of every engine.
type Health struct {
	// Interval is the time between two Pings of an engine. The default is
	// DefaultHealthInterval (1s).
	Interval time.Duration `mapstructure:"interval"`
	// Threshold is how many failed Pings in a row mark an engine down. The
	// default is DefaultHealthThreshold (3).
	Threshold int `mapstructure:"threshold"`
}

// LeaseDefaults are the lease periods a Client uses when a call sets none
// (the YAML key lease).
type LeaseDefaults struct {
	// TTL, when positive, makes every lease a fixed lease that expires TTL
	// after its grant. The default, 0, is automatic renewal.
	TTL time.Duration `mapstructure:"ttl"`
	// Watchdog is the lease period of renewed leases: how long a crashed
	// holder keeps its keys. The default is DefaultLeaseWatchdog (30s).
	Watchdog time.Duration `mapstructure:"watchdog"`
	// HoldLimit, when positive, ends every lease that long after its grant
	// even while its watchdog renews it (cerberus.WithHoldLimit): the
	// holder's Done closes with cerberus.ErrHoldLimit, then the key is
	// released. 0 or within [engine.MinTTL, engine.MaxTTL]; it need not
	// exceed the watchdog, since the client's own timer keeps it. The
	// default, 0, is no limit.
	HoldLimit time.Duration `mapstructure:"hold_limit"`
}

// EngineSpec configures one engine (an entry of the YAML key engines).
// Which fields apply depends on Kind; a field set for a kind it does not
// apply to is a validation error.
type EngineSpec struct {
	// Name identifies the engine: unique, made of [a-z0-9-].
	Name string `mapstructure:"name"`
	// Kind is one of Kinds.
	Kind string `mapstructure:"kind"`
	// Addrs are host:port addresses. redis and consul take exactly one,
	// redis-cluster one or more seed nodes, redlock at least three
	// independent masters, zookeeper and etcd one or more servers (etcd:
	// client endpoints). memory, mysql and postgres take none.
	Addrs []string `mapstructure:"addrs"`
	// DSN is the go-sql-driver/mysql DSN of a mysql engine, or the pgx
	// connection string (a postgres:// URL or key=value pairs) of a postgres
	// engine. Its password is never printed.
	DSN string `mapstructure:"dsn"`
	// Username is the Redis ACL user (redis, redis-cluster, redlock) that
	// Password authenticates; empty means the default user (AUTH with the
	// password alone). See package engine/redis for the smallest ACL the
	// engine needs. On a zookeeper engine it is the digest user, which
	// needs a password: the engine then authenticates as user:password and
	// protects its lock nodes with a digest ACL (zookeeper.WithDigest), so
	// a client without these credentials can neither queue on a key nor
	// delete a holder's node. On an etcd engine it is the etcd user, which
	// needs a password (and the password a user); its role needs
	// read-write on the prefix. On a postgres engine it is optional and
	// replaces the DSN's user.
	Username string `mapstructure:"username"`
	// Password is the Redis AUTH password (redis, redis-cluster, redlock)
	// the ZooKeeper digest password (zookeeper) or the etcd user's password
	// (etcd), or the PostgreSQL password (postgres; it replaces the DSN's,
	// so the DSN need not hold it). At most one of
	// Password, PasswordFile and PasswordEnv may be set.
	Password string `mapstructure:"password"`
	// PasswordFile names a file holding the password; a trailing newline
	// is dropped.
	PasswordFile string `mapstructure:"password_file"`
	// PasswordEnv names an environment variable holding the password.
	PasswordEnv string `mapstructure:"password_env"`
	// Token is the Consul ACL token. At most one of Token, TokenFile and
	// TokenEnv may be set.
	Token string `mapstructure:"token"`
	// TokenFile names a file holding the Consul ACL token.
	TokenFile string `mapstructure:"token_file"`
	// TokenEnv names an environment variable holding the Consul ACL token.
	TokenEnv string `mapstructure:"token_env"`
	// Prefix is the key prefix (redis kinds: no braces; etcd: no control
	// characters), KV folder (consul) or base znode path (zookeeper,
	// absolute). Empty means the engine's default.
	Prefix string `mapstructure:"prefix"`
	// Fair grants waiting writers in arrival order (redis, redis-cluster,
	// consul).
	Fair bool `mapstructure:"fair"`
	// Starvation is how long a writer in the default (unordered) mode
	// races before it queues, within [0, 1m] (redis, redis-cluster,
	// consul). Nil means the engine's default; an explicit 0s turns
	// starvation mode off.
	Starvation *time.Duration `mapstructure:"starvation"`
	// Strategy is the mysql strategy: "lease" (the default), "row" or
	// "session" (GET_LOCK, exclusive leases only); or
	// the postgres strategy: "session" (the default) or "lease".
	Strategy string `mapstructure:"strategy"`
	// Table is the mysql or postgres lock table. Empty means the engine's
	// default.
	Table string `mapstructure:"table"`
	// SessionTimeout is the zookeeper session timeout. The default is
	// DefaultZKSessionTimeout (4s).
	SessionTimeout time.Duration `mapstructure:"session_timeout"`
	// SessionTTL is the consul session TTL, within [10s, 24h], or the etcd
	// lease TTL, within [1s, 24h], rounded up to whole seconds: how long a
	// holder that stops talking keeps its keys. Zero means the engine's
	// default (consul 15s, etcd 10s).
	SessionTTL time.Duration `mapstructure:"session_ttl"`
	// LockDelay is the consul session lock-delay, within [0, 60s]. Nil
	// means the engine's default (15s); an explicit 0s turns it off.
	LockDelay *time.Duration `mapstructure:"lock_delay"`
	// Datacenter is the consul datacenter. Empty means the agent's own.
	Datacenter string `mapstructure:"datacenter"`
	// MaxConns caps the engine's connections: the go-redis pool size (per
	// node for redlock and redis-cluster), consul's HTTP connections (at
	// least 1) or the mysql or postgres pool (at least 3). Zero means the
	// default.
	MaxConns int `mapstructure:"max_conns"`
	// SessionConns is how many connections the postgres or mysql
	// session strategy shares among the leases it grants at once
	// (postgres.WithSessionConns, mysql.WithSessionConns; at least 1, and
	// max_conns at least SessionConns+2 for postgres, SessionConns+3 for
	// mysql). Zero means the default (2).
	SessionConns int `mapstructure:"session_conns"`
	// HolderRecords is whether the mysql or postgres session strategy
	// records its holders and keeps a token counter per key
	// (mysql.WithHolderRecords, postgres.WithHolderRecords). Nil means the
	// default, true; false makes a grant the lock and a read of the
	// server's clock with no write, at the price of a bare GET_LOCK or
	// pg_advisory_lock: the token is then the server's clock alone, and
	// listing, inspecting and force-releasing the engine's locks are not
	// supported. Only with strategy session.
	HolderRecords *bool `mapstructure:"holder_records"`
	// TLS, when set, encrypts the connections to the servers (redis,
	// redis-cluster, redlock, consul, mysql, etcd, postgres). For postgres
	// the DSN must not set sslmode then. For mysql, Build registers
	// the TLS configuration with go-sql-driver/mysql under a name derived
	// from the engine and adds tls=<name> to the DSN, so the DSN must not
	// set tls itself.
	TLS *TLS `mapstructure:"tls"`

	password string // resolved Redis, ZooKeeper or etcd password
	token    string // resolved Consul token
}

// RedisPassword returns the password resolved at load time from Password,
// PasswordFile or PasswordEnv, or "": the Redis AUTH password, on a
// zookeeper engine the digest password, on an etcd engine the user's.
func (e *EngineSpec) RedisPassword() string { return e.password }

// ConsulToken returns the Consul ACL token resolved at load time from Token,
// TokenFile or TokenEnv, or "".
func (e *EngineSpec) ConsulToken() string { return e.token }

// Find returns the configured engine named name, or nil.
func (c *Config) Find(name string) *EngineSpec {
	for i := range c.Engines {
		if c.Engines[i].Name == name {
			return &c.Engines[i]
		}
	}
	return nil
}

// Warnings reports settings that are valid but probably not what was
// meant, such as an override naming an engine that is not configured. It
// never contains secrets.
func (c *Config) Warnings() []string {
	var w []string
	if c.Active != "" && c.Find(c.Active) == nil {
		w = append(w, fmt.Sprintf("engine: %q names no configured engine; the first healthy engine in "+
			"order is used", c.Active))
	}
	if pw := c.PinWarning(""); pw != "" {
		w = append(w, pw)
	}
	if c.EngineKey.Quorum == 1 && c.Auto {
		w = append(w, "engine_key.quorum: 1 lets one process that alone loses an engine move the whole "+
			"fleet")
	}
	key, period := c.leaseKey()
	for i, e := range c.Engines {
		switch {
		case e.Kind == KindZooKeeper && period < e.zkFloor():
			w = append(w, fmt.Sprintf("%s: %v is below engines[%d] (%s)'s session timeout: a crashed or "+
				"paused holder keeps its keys until the server expires its session, within %v",
				key, period, i, e.Name, e.zkFloor()))
		case e.Kind == KindMySQL && (e.Strategy == "row" || e.Strategy == "session") && period < 2*time.Second:
			w = append(w, fmt.Sprintf("%s: %v is below engines[%d] (%s)'s floor of 2s: the server ends a "+
				"silent holder's session after a wait_timeout of whole seconds, one more than the period",
				key, period, i, e.Name))
		}
	}
	if c.Failback == FailbackAuto && !c.Auto {
		w = append(w, "failback: \"auto\" has no effect while auto is false")
	}
	return w
}

// PinWarning says, when the file pins an engine (engine) while an engine
// key decides, that the pin moves no process and which command does;
// otherwise it returns "". path is the file's, for the command ("": a
// placeholder). Warnings includes it, Open logs it at start and at every
// reload that finds it, and cerberusctl status prints it.
func (c *Config) PinWarning(path string) string {
	if c.Active == "" || !c.EngineKey.Set() {
		return ""
	}
	if path == "" {
		path = "<this file>"
	}
	return fmt.Sprintf("engine: %q in the file moves no process while engine_key %s decides "+
		"(an empty key means the first engine); move the fleet with "+
		"`cerberusctl use -config %s %s`", c.Active, c.EngineKey.Key, path, c.Active)
}

// zkFloor bounds how long a silent holder keeps its keys on a zookeeper
// engine: the session timeout, plus up to one server tickTime, which is at
// most half the negotiated timeout.
func (e *EngineSpec) zkFloor() time.Duration {
	t := e.SessionTimeout
	if t == 0 {
		t = DefaultZKSessionTimeout
	}
	return t * 3 / 2
}

// defaults returns a Config holding every default, for decoding into.
func defaults() Config {
	return Config{
		Health:   Health{Interval: DefaultHealthInterval, Threshold: DefaultHealthThreshold},
		Failback: DefaultFailback,
		Fence:    true,
		Lease:    LeaseDefaults{Watchdog: DefaultLeaseWatchdog},
	}
}

const redacted = "<redacted>"

// String describes the configuration without any secret.
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("config{engines: [")
	for i, e := range c.Engines {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e.String())
	}
	fmt.Fprintf(&b, "], engine: %q, health: {interval: %v, threshold: %d}, auto: %t, failback: %q, "+
		"fence: %t, lease: {ttl: %v, watchdog: %v, hold_limit: %v}",
		c.Active, c.Health.Interval, c.Health.Threshold, c.Auto, c.Failback, c.Fence, c.Lease.TTL,
		c.Lease.Watchdog, c.Lease.HoldLimit)
	if c.SingleProcess {
		b.WriteString(", single_process: true")
	}
	if c.EngineKey.Set() {
		fmt.Fprintf(&b, ", engine_key: %s", c.EngineKey)
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String, so that %#v hides secrets too.
func (c Config) GoString() string { return c.String() }

// String describes the engine without any secret: passwords and tokens
// show as <redacted>, a DSN with its password replaced.
func (e EngineSpec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s(%s", e.Name, e.Kind)
	if len(e.Addrs) > 0 {
		fmt.Fprintf(&b, " addrs=%s", strings.Join(e.Addrs, ","))
	}
	str := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, " %s=%q", k, v)
		}
	}
	if e.DSN != "" {
		if e.Kind == KindPostgres {
			fmt.Fprintf(&b, " dsn=%q", RedactPostgresDSN(e.DSN))
		} else {
			fmt.Fprintf(&b, " dsn=%q", RedactDSN(e.DSN))
		}
	}
	str("username", e.Username)
	if e.Password != "" || e.password != "" {
		str("password", redacted)
	}
	str("password_file", e.PasswordFile)
	str("password_env", e.PasswordEnv)
	if e.Token != "" || e.token != "" {
		str("token", redacted)
	}
	str("token_file", e.TokenFile)
	str("token_env", e.TokenEnv)
	str("prefix", e.Prefix)
	if e.Fair {
		b.WriteString(" fair")
	}
	if e.Starvation != nil {
		fmt.Fprintf(&b, " starvation=%v", *e.Starvation)
	}
	str("strategy", e.Strategy)
	str("table", e.Table)
	if e.SessionTimeout != 0 {
		fmt.Fprintf(&b, " session_timeout=%v", e.SessionTimeout)
	}
	if e.SessionTTL != 0 {
		fmt.Fprintf(&b, " session_ttl=%v", e.SessionTTL)
	}
	if e.LockDelay != nil {
		fmt.Fprintf(&b, " lock_delay=%v", *e.LockDelay)
	}
	str("datacenter", e.Datacenter)
	if e.MaxConns != 0 {
		fmt.Fprintf(&b, " max_conns=%d", e.MaxConns)
	}
	if e.SessionConns != 0 {
		fmt.Fprintf(&b, " session_conns=%d", e.SessionConns)
	}
	if e.HolderRecords != nil {
		fmt.Fprintf(&b, " holder_records=%v", *e.HolderRecords)
	}
	if e.TLS != nil {
		fmt.Fprintf(&b, " tls=%s", e.TLS)
	}
	b.WriteString(")")
	return b.String()
}

// GoString is String, so that %#v hides secrets too.
func (e EngineSpec) GoString() string { return e.String() }

// RedactDSN returns a go-sql-driver/mysql DSN with its password replaced
// by <redacted>. A DSN that does not parse is replaced whole.
func RedactDSN(dsn string) string {
	c, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		return redacted
	}
	if c.Passwd != "" {
		c.Passwd = redacted
	}
	return c.FormatDSN()
}

// pgPasswordRE finds the password of a key=value PostgreSQL connection
// string: password=secret or password='a secret'.
var pgPasswordRE = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']*)`)

// RedactPostgresDSN returns a PostgreSQL connection string (URL or
// key=value) with its password replaced by <redacted>. A URL that does not
// parse is replaced whole.
func RedactPostgresDSN(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return redacted
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", redacted)
			u.RawQuery = q.Encode()
		}
		// url escapes the brackets of the placeholder; show them plainly.
		return strings.ReplaceAll(u.String(), url.QueryEscape(redacted), redacted)
	}
	return pgPasswordRE.ReplaceAllString(dsn, "${1}"+redacted)
}

// Package config reads cerberus's configuration: which engines exist, in
// which order they are preferred, which one an operator pinned, and how
// health checks, failover and leases behave. It is also where engine names
// meet engine constructors: Config.Build turns each configured engine into a
// running engine.Engine with one explicit switch on its kind, so nothing
// registers itself in init().
//
// # Sources
//
// Load reads a YAML, TOML or JSON file (chosen by its extension) through
// viper and applies CERBERUS_* environment overrides to the top-level
// scalar keys:
//
//	CERBERUS_ENGINE            engine
//	CERBERUS_AUTO              auto
//	CERBERUS_FAILBACK          failback
//	CERBERUS_FENCE             fence
//	CERBERUS_HEALTH_INTERVAL   health.interval
//	CERBERUS_HEALTH_THRESHOLD  health.threshold
//	CERBERUS_LEASE_TTL         lease.ttl
//	CERBERUS_LEASE_WATCHDOG    lease.watchdog
//	CERBERUS_LEASE_HOLD_LIMIT  lease.hold_limit
//
// Parse reads configuration held in memory (a test fixture, a Consul KV
// value) and applies no environment overrides. Watch reloads a file when it
// changes, including when an editor replaces it by renaming a new file over
// it.
//
// # Example (YAML)
//
//	engines:
//	  - name: primary
//	    kind: redis
//	    addrs: ["127.0.0.1:6379"]
//	    password_file: /run/secrets/redis
//	  - name: fallback
//	    kind: mysql
//	    dsn: "locker:secret@tcp(127.0.0.1:3306)/locks"
//	engine: ""          # pin an engine by name; empty = first healthy
//	health: {interval: 1s, threshold: 3}
//	auto: false
//	failback: "off"
//	fence: true
//	lease: {ttl: 0s, watchdog: 30s, hold_limit: 0s}  # hold_limit: end any lease after it; 0 = none
//
// Durations are Go duration strings ("1s", "250ms"); bare numbers are
// refused rather than read as nanoseconds.
//
// # Validation
//
// Unknown keys are errors. Every problem is reported at once (errors.Join),
// each message starting with its key path, such as
// "engines[1].addrs: required for kind redis", and every error wraps
// ErrInvalid. Settings that do not apply to an engine's kind (fair on a
// mysql engine, say) are errors too, rather than options silently ignored.
//
// # Secrets
//
// A Redis password, a ZooKeeper digest password, an etcd user's password
// or a PostgreSQL password (which replaces the DSN's) comes from password,
// password_file or password_env (at most one), a Consul ACL token likewise
// from token, token_file or token_env; files and environment variables are
// read at load time. The resolved values are reachable only through
// Engine.RedisPassword and Engine.ConsulToken. Config.String, every fmt verb on Config and Engine,
// and every error this package returns leave out passwords, tokens and the
// password part of a MySQL DSN or a PostgreSQL connection string. A Redis ACL user is username (with one of
// the password keys); so is a ZooKeeper digest user, whose lock nodes the
// engine then protects with a digest ACL, and an etcd user, whose role
// needs read-write on the engine's prefix. The engine key has its own
// token, token_file or token_env (EngineKey.ConsulToken), not taken from a
// consul engine. Every process needs key "<key>" read to follow the key,
// and, to appear in the fleet view and take part in automatic decisions,
// key_prefix "<key>/fleet/" write and session write; with auto, and where
// SetEngineKey, Switch or cerberusctl use run, key "<key>" write. A
// process whose token lacks the fleet rights still follows the key, and
// says why it is not registered.
//
// # TLS
//
// A tls section on a redis, redis-cluster, redlock, consul, mysql, etcd or
// postgres engine, or on engine_key, turns TLS on:
//
//	tls:
//	  ca_file: /etc/cerberus/ca.pem     # verifies the server; empty: system roots
//	  cert_file: /etc/cerberus/client.pem  # client certificate (mutual TLS),
//	  key_file: /etc/cerberus/client-key.pem  # set both or neither
//	  server_name: redis.internal       # empty: the host dialled
//	  insecure_skip_verify: false       # tests only; not with ca_file or server_name
//
// "tls: {}" is TLS verified with the system's roots. The files are checked
// at load time ("engines[0].tls.ca_file: open ...: no such file or
// directory") and read again by Build. For mysql, Build registers the TLS
// configuration with go-sql-driver/mysql as
// "cerberus-<engine name>-<hash of the section>" and adds tls=<that name>
// to the DSN, which must therefore not set tls itself. For postgres, Build
// gives pgx the TLS configuration with no plain-text fallback, and the DSN
// must not set sslmode.
//
// # PostgreSQL
//
//	engines:
//	  - name: pg
//	    kind: postgres
//	    dsn: "postgres://locker@127.0.0.1:5432/locks"
//	    password_env: PGLOCK_PASSWORD
//	    strategy: session   # or lease, behind PgBouncer in transaction mode
//	    table: cerberus_locks
//	    max_conns: 32       # session: session_conns, plus one per lease that waited
//	    session_conns: 2    # session: connections shared by every uncontended lease
//	    holder_records: true # session: false for the price of a bare advisory lock (tokens from the
//	                         # server's clock alone; no listing, inspection or force release)
package config

package integration

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/config"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// leakScanner collects the text of every log line and error a test
// produces and finds the registered secrets in it.
type leakScanner struct {
	mu      sync.Mutex
	secrets map[string]string // secret -> what it is
	texts   []scanned
	lines   map[string]int // log lines per source
}

type scanned struct{ where, text string }

func newLeakScanner() *leakScanner {
	return &leakScanner{secrets: make(map[string]string), lines: make(map[string]int)}
}

// secret returns a new distinctive secret (what plus 24 random hex digits,
// so a hit cannot be a coincidence) and registers it.
func (s *leakScanner) secret(t *testing.T, what string) string {
	t.Helper()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	sec := what + "-" + hex.EncodeToString(b[:])
	s.register(sec, what)
	return sec
}

// register adds a secret that the test did not make, such as a token
// Consul generated.
func (s *leakScanner) register(secret, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets[secret] = what
}

func (s *leakScanner) add(where, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.texts = append(s.texts, scanned{where, text})
}

// err records err as every form it is likely to be printed in.
func (s *leakScanner) err(where string, err error) {
	if err == nil {
		return
	}
	s.add(where, err.Error())
	s.value(where, err)
}

// value records v printed with %v, %+v, %#v and %s.
func (s *leakScanner) value(where string, v any) {
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		s.add(where+" "+verb, fmt.Sprintf(verb, v))
	}
}

// writer returns an io.Writer whose every write is a log line of source.
func (s *leakScanner) writer(source string) io.Writer { return lineWriter{s, source} }

type lineWriter struct {
	s      *leakScanner
	source string
}

func (w lineWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	w.s.lines[w.source]++
	w.s.mu.Unlock()
	w.s.add("log "+w.source, string(p))
	return len(p), nil
}

// slogger is a debug-level slog.Logger writing to the scanner.
func (s *leakScanner) slogger(source string) *slog.Logger {
	return slog.New(slog.NewTextHandler(s.writer(source), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// leaks lists every scanned text that holds a secret.
func (s *leakScanner) leaks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, x := range s.texts {
		for sec, what := range s.secrets {
			if strings.Contains(x.text, sec) {
				out = append(out, fmt.Sprintf("%s holds the %s: %q", x.where, what, x.text))
			}
		}
	}
	return out
}

// logText returns everything logged so far, for checks that logging was
// captured at all.
func (s *leakScanner) logText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, x := range s.texts {
		if strings.HasPrefix(x.where, "log ") {
			b.WriteString(x.text)
		}
	}
	return b.String()
}

// allText returns every scanned text.
func (s *leakScanner) allText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, x := range s.texts {
		b.WriteString(x.text)
		b.WriteString("\n")
	}
	return b.String()
}

// redisLogger sends go-redis's log lines to a writer.
type redisLogger struct{ w io.Writer }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	fmt.Fprintf(l.w, "redis: "+format+"\n", v...)
}

// zkLogger sends go-zookeeper's log lines to a writer.
type zkLogger struct{ w io.Writer }

func (l zkLogger) Printf(format string, v ...any) { fmt.Fprintf(l.w, "zk: "+format+"\n", v...) }

// captureGlobalLogs sends the process-wide loggers (go-redis,
// go-sql-driver/mysql, the standard log package and slog's default) to s
// until the test ends, then back to standard error.
func captureGlobalLogs(t *testing.T, s *leakScanner) {
	redis.SetLogger(redisLogger{s.writer("go-redis")})
	_ = mysql.SetLogger(log.New(s.writer("go-sql-driver"), "[mysql] ", 0))
	prevSlog := slog.Default()
	log.SetOutput(s.writer("log"))
	slog.SetDefault(s.slogger("slog.Default"))
	t.Cleanup(func() {
		slog.SetDefault(prevSlog)
		log.SetOutput(os.Stderr)
		redis.SetLogger(redisLogger{os.Stderr})
		_ = mysql.SetLogger(log.New(os.Stderr, "[mysql] ", log.Ldate|log.Ltime|log.Lshortfile))
	})
}

// secCtx is a context for one operation.
func secCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// secClient builds the only engine of a parsed configuration into a
// Client that logs to s, recording the configuration as printed.
func secClient(t *testing.T, s *leakScanner, where string, cfg *config.Config) *cerberus.Client {
	t.Helper()
	s.value(where+": config", cfg)
	s.value(where+": *config", *cfg)
	s.value(where+": engines", cfg.Engines)
	s.value(where+": engine_key", cfg.EngineKey)
	s.value(where+": warnings", cfg.Warnings())
	built, err := cfg.Build(secCtx(t, 30*time.Second))
	if err != nil {
		t.Fatalf("%s: Build: %v", where, err)
	}
	return secWrap(t, s, where, built[0].Engine)
}

// secWrap makes a Client over e that logs to s and closes with the test.
func secWrap(t *testing.T, s *leakScanner, where string, e engine.Engine) *cerberus.Client {
	t.Helper()
	c, err := cerberus.New(e, cerberus.WithObserver(cerberus.LogObserver(s.slogger("observer "+where))),
		cerberus.WithWatchdog(max(time.Second, e.Limits().MinTTL)))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	t.Cleanup(func() { s.err(where+": Close", c.Close()) })
	return c
}

// parse parses a YAML configuration, recording its error if any.
func (s *leakScanner) parse(t *testing.T, where, src string) (*config.Config, error) {
	t.Helper()
	cfg, err := config.Parse([]byte(src), "yaml")
	s.err(where+": Parse", err)
	if cfg != nil {
		s.value(where+": config", cfg)
	}
	return cfg, err
}

// mustParse parses a configuration that must be valid.
func (s *leakScanner) mustParse(t *testing.T, where, src string) *config.Config {
	t.Helper()
	cfg, err := s.parse(t, where, src)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	return cfg
}

// mustFailParse parses a configuration that must be refused.
func (s *leakScanner) mustFailParse(t *testing.T, where, src string) {
	t.Helper()
	if _, err := s.parse(t, where, src); err == nil {
		t.Errorf("%s: Parse accepted it", where)
	}
}

// roundTrip locks and unlocks key, tries it while held (refused, and
// logged as such), and tries bad keys; every error is recorded.
func roundTrip(t *testing.T, s *leakScanner, where string, c *cerberus.Client, key string) {
	t.Helper()
	ctx := secCtx(t, 30*time.Second)
	l, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatalf("%s: Lock: %v", where, err)
	}
	_, err = c.TryLock(ctx, key) // no owner in ctx: another holder, as with sync.Mutex
	if !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Errorf("%s: TryLock of a held key: want ErrNotAcquired, got %v", where, err)
	}
	s.err(where+": TryLock held", err)
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("%s: Unlock: %v", where, err)
	}
	s.err(where+": second Unlock", l.Unlock(ctx))
	for _, bad := range []string{"", strings.Repeat("k", 100000)} {
		_, err := c.Lock(ctx, bad)
		if err == nil {
			t.Errorf("%s: Lock of a bad key succeeded", where)
		}
		s.err(where+": Lock bad key", err)
	}
}

// mustFail runs Lock and TryLock of key, which must fail before their
// context ends, and records the errors.
func mustFail(t *testing.T, s *leakScanner, where string, c *cerberus.Client, key string) {
	t.Helper()
	for _, try := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var l *cerberus.Lease
		var err error
		if try {
			l, err = c.TryLock(ctx, key)
		} else {
			l, err = c.Lock(ctx, key)
		}
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			_ = l.Unlock(context.Background())
			t.Errorf("%s: lock succeeded", where)
			continue
		}
		if timedOut {
			t.Errorf("%s: failed only when its context ended: %v", where, err)
		}
		s.err(where, err)
		s.err(where+": Ping", c.Ping(secCtx(t, 10*time.Second)))
	}
}

// TestSecretScannerFindsPlanted: the scanner the next test relies on finds
// a secret in a log line, an error chain and a printed value, and reports
// nothing when there is nothing.
func TestSecretScannerFindsPlanted(t *testing.T) {
	s := newLeakScanner()
	sec := s.secret(t, "planted")
	lg := s.slogger("self-check")
	lg.Warn("cerberus: lock not acquired", slog.String("err", "no secret here"))
	s.err("clean error", fmt.Errorf("outer: %w", errors.New("inner")))
	s.value("clean value", struct{ A string }{"x"})
	if got := s.leaks(); len(got) != 0 {
		t.Fatalf("false positives: %q", got)
	}
	lg.Warn("cerberus: lock not acquired", slog.String("err", "dial u:"+sec+"@tcp(x)"))
	s.err("error chain", fmt.Errorf("outer: %w", &engine.OpError{Engine: "redis", Op: "acquire", Err: errors.New("AUTH " + sec)}))
	s.value("struct", struct{ Password string }{sec})
	zkLogger{s.writer("zk")}.Printf("digest %s", "alice:"+sec)
	got := s.leaks()
	for _, where := range []string{"log self-check", "error chain", "struct %#v", "log zk"} {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, where)
		}
		if !found {
			t.Errorf("the scanner missed the secret planted in %q; it found %q", where, got)
		}
	}
}

// TestNoSecretsInLogsOrErrors runs successful and failing operations on
// every engine that has a secret (a Redis password, a Redis ACL user's
// password, a MySQL DSN password, a ZooKeeper digest password, a Consul
// token and an engine key token): right and wrong secrets, no secret, a
// server that dies, bad keys, configurations that do not validate. Every
// log line (the LogObserver's slog, go-zookeeper's logger, go-redis's and
// go-sql-driver's loggers, the log package, slog's default, config.Open's
// logger) and every error and configuration value, printed with %v, %+v,
// %#v and %s, must be free of every secret.
func TestNoSecretsInLogsOrErrors(t *testing.T) {
	// Its closing checks need the subtests, which start servers.
	testenv.Needs(t, "Redis, ZooKeeper, Consul and MariaDB")
	s := newLeakScanner()
	captureGlobalLogs(t, s)

	t.Run("redis password", func(t *testing.T) {
		pw := s.secret(t, "redis-pw")
		srv := testenv.StartRedis(t)
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
		if err := admin.ConfigSet(secCtx(t, 10*time.Second), "requirepass", pw).Err(); err != nil {
			t.Fatal(err)
		}
		_ = admin.Close()
		pwFile := filepath.Join(t.TempDir(), "pw")
		if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		wrong := s.secret(t, "wrong-redis-pw")
		t.Setenv("CERBERUS_TEST_WRONG_REDIS_PW", wrong)
		engines := func(pwKey string) string {
			return fmt.Sprintf("engines: [{name: r, kind: redis, addrs: [%q], prefix: \"sec:\", %s}]", srv.Addr, pwKey)
		}
		good := secClient(t, s, "redis inline", s.mustParse(t, "redis inline", engines(fmt.Sprintf("password: %q", pw))))
		roundTrip(t, s, "redis inline", good, "sec/redis")
		roundTrip(t, s, "redis file", secClient(t, s, "redis file", s.mustParse(t, "redis file", engines(fmt.Sprintf("password_file: %q", pwFile)))), "sec/redis")
		mustFail(t, s, "redis wrong password", secClient(t, s, "redis wrong", s.mustParse(t, "redis wrong", engines("password_env: CERBERUS_TEST_WRONG_REDIS_PW"))), "sec/fail")
		s.mustFailParse(t, "redis two passwords", engines(fmt.Sprintf("password: %q, password_file: %q", pw, pwFile)))
		s.mustFailParse(t, "redis bad value", engines(fmt.Sprintf("password: {nested: %q}", pw)))
		s.mustFailParse(t, "redis syntax", engines(fmt.Sprintf("password: '%s", pw)))
		s.mustFailParse(t, "redis unknown key", engines(fmt.Sprintf("passwd: %q, password: %q", pw, pw)))
		// The server dies under a held lease: the loss and the next
		// failures are logged and returned.
		held, err := good.Lock(secCtx(t, 10*time.Second), "sec/redis-held")
		if err != nil {
			t.Fatal(err)
		}
		srv.Kill()
		select {
		case <-held.Done():
			s.err("redis killed: lease", held.Err())
		case <-time.After(20 * time.Second):
			t.Error("the lease outlived its server by 20s")
		}
		mustFail(t, s, "redis killed", good, "sec/fail")
	})

	t.Run("redis acl user", func(t *testing.T) {
		pw, wrong := s.secret(t, "redis-acl-pw"), s.secret(t, "wrong-acl-pw")
		srv := testenv.StartRedis(t)
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer admin.Close()
		ctx := secCtx(t, 10*time.Second)
		for _, u := range []struct{ name, cmds string }{
			{"locker", "+ping +evalsha +eval +script|load +subscribe +unsubscribe +publish +client|setname +exists +get +set +del +incr +pexpire +pexpireat +pttl +time +zadd +zrem +zscore +zcard +zcount +zrange +zrangebyscore +zremrangebyscore +lindex +lpop +lpos +lrem +rpush +hget +hset +hdel"},
			{"noeval", "+ping +subscribe +unsubscribe"},
		} {
			args := []any{"ACL", "SETUSER", u.name, "on", ">" + pw, "resetkeys", "~cerberus:*", "resetchannels", "&cerberus:*", "nocommands"}
			for _, c := range strings.Fields(u.cmds) {
				args = append(args, c)
			}
			if err := admin.Do(ctx, args...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		user := func(name, password string) string {
			return fmt.Sprintf("engines: [{name: r, kind: redis, addrs: [%q], username: %s, password: %q}]", srv.Addr, name, password)
		}
		roundTrip(t, s, "acl user", secClient(t, s, "acl user", s.mustParse(t, "acl user", user("locker", pw))), "sec/acl")
		mustFail(t, s, "acl wrong password", secClient(t, s, "acl wrong", s.mustParse(t, "acl wrong", user("locker", wrong))), "sec/fail")
		mustFail(t, s, "acl without EVAL", secClient(t, s, "acl noeval", s.mustParse(t, "acl noeval", user("noeval", pw))), "sec/fail")
		s.mustFailParse(t, "acl on consul", fmt.Sprintf("engines: [{name: c, kind: consul, addrs: [%q], username: locker, password: %q}]", srv.Addr, pw))
	})

	t.Run("mysql dsn", func(t *testing.T) {
		pw, wrong := s.secret(t, "mysql-pw"), s.secret(t, "wrong-mysql-pw")
		m := testenv.StartMariaDB(t)
		root, err := sql.Open("mysql", m.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		for _, q := range []string{"CREATE USER 'locker'@'%' IDENTIFIED BY '" + pw + "'", "GRANT ALL ON test.* TO 'locker'@'%'"} {
			if _, err := root.Exec(q); err != nil {
				t.Fatal(strings.ReplaceAll(err.Error(), pw, "<pw>"))
			}
		}
		dsn := func(password string) string { return "locker:" + password + "@tcp(" + m.Addr + ")/test?timeout=2s" }
		src := func(dsn string) string {
			return fmt.Sprintf("engines: [{name: db, kind: mysql, dsn: %q, table: cerberus_sec}]", dsn)
		}
		good := secClient(t, s, "mysql", s.mustParse(t, "mysql", src(dsn(pw))))
		roundTrip(t, s, "mysql", good, "sec/mysql")
		// A wrong password fails Build (Migrate connects).
		wrongCfg := s.mustParse(t, "mysql wrong", src(dsn(wrong)))
		if built, err := wrongCfg.Build(secCtx(t, 20*time.Second)); err == nil {
			for _, n := range built {
				_ = n.Engine.Close()
			}
			t.Error("mysql: Build with a wrong password succeeded")
		} else {
			s.err("mysql wrong: Build", err)
		}
		s.mustFailParse(t, "mysql bad dsn", src("locker:"+pw+"@tcp("+m.Addr+"/test"))
		s.mustFailParse(t, "mysql bad param", src(dsn(pw)+"&tls=nonesuch"))
		s.mustFailParse(t, "mysql invalid", fmt.Sprintf("engines: [{name: db, kind: mysql, dsn: %q}, {name: db, kind: mysql, dsn: %q, fair: true}]", dsn(pw), dsn(wrong)))
		held, err := good.Lock(secCtx(t, 10*time.Second), "sec/mysql-held")
		if err != nil {
			t.Fatal(err)
		}
		m.Kill()
		select {
		case <-held.Done():
			s.err("mysql killed: lease", held.Err())
		case <-time.After(20 * time.Second):
			t.Error("the lease outlived its server by 20s")
		}
		mustFail(t, s, "mysql killed", good, "sec/fail")
	})

	t.Run("zookeeper digest", func(t *testing.T) {
		addr := testenv.ZooKeeperAddr(t)
		pw, wrong := s.secret(t, "zk-pw"), s.secret(t, "wrong-zk-pw")
		base := "/cerberus-sec-" + s.secret(t, "base")[len("base-"):]
		t.Cleanup(func() { removeTree(t, addr, base) })
		dial := func(where string, servers []string, opts ...zookeeper.Option) *cerberus.Client {
			t.Helper()
			opts = append([]zookeeper.Option{zookeeper.WithSessionTimeout(4 * time.Second), zookeeper.WithPrefix(base),
				zookeeper.WithLogger(zkLogger{s.writer("zk " + where)})}, opts...)
			e, err := zookeeper.Dial(servers, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return secWrap(t, s, where, e)
		}
		good := dial("zk", []string{addr}, zookeeper.WithDigest("locker", pw))
		roundTrip(t, s, "zk", good, "sec/zk")
		held, err := good.Lock(secCtx(t, 10*time.Second), "sec/zk-held")
		if err != nil {
			t.Fatal(err)
		}
		// Other clients on the held key: refused by its digest ACL.
		mustFail(t, s, "zk wrong password", dial("zk wrong", []string{addr}, zookeeper.WithDigest("locker", wrong)), "sec/zk-held")
		mustFail(t, s, "zk no credentials", dial("zk none", []string{addr}), "sec/zk-held")
		if held.Err() != nil {
			t.Errorf("the holder lost its lease: %v", held.Err())
		}
		s.err("zk held: Unlock", held.Unlock(secCtx(t, 10*time.Second)))
		// No server: the connection's retries are logged.
		down := dial("zk down", []string{"127.0.0.1:1"}, zookeeper.WithDigest("locker", pw))
		_, err = down.Lock(secCtx(t, 3*time.Second), "sec/zk")
		if err == nil {
			t.Error("zk: Lock without a server succeeded")
		}
		s.err("zk down", err)
	})

	t.Run("consul token", func(t *testing.T) {
		mgmt := s.secret(t, "mgmt")
		mgmt = consulUUIDFrom(mgmt)
		s.register(mgmt, "consul management token")
		a, _ := testenv.StartConsulACL(t, mgmt)
		tok := testenv.ConsulToken(t, a.Addr, mgmt, `session_prefix "" { policy = "write" }
key_prefix "cerberus-sec/" { policy = "write" }
key "cerberus-sec-engine" { policy = "write" }`)
		s.register(tok, "consul token")
		wrong := consulUUIDFrom(s.secret(t, "wrong"))
		s.register(wrong, "wrong consul token")
		tokFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokFile, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		src := func(tokenKey string) string {
			return fmt.Sprintf("engines: [{name: c, kind: consul, addrs: [%q], prefix: cerberus-sec, lock_delay: 0s %s}]", a.Addr, tokenKey)
		}
		good := secClient(t, s, "consul", s.mustParse(t, "consul", src(fmt.Sprintf(", token_file: %q", tokFile))))
		roundTrip(t, s, "consul", good, "sec/consul")
		roundTrip(t, s, "consul inline", secClient(t, s, "consul inline", s.mustParse(t, "consul inline", src(fmt.Sprintf(", token: %q", tok)))), "sec/consul")
		mustFail(t, s, "consul wrong token", secClient(t, s, "consul wrong", s.mustParse(t, "consul wrong", src(fmt.Sprintf(", token: %q", wrong)))), "sec/fail")
		mustFail(t, s, "consul no token", secClient(t, s, "consul none", s.mustParse(t, "consul none", src(""))), "sec/fail")
		s.mustFailParse(t, "consul two tokens", src(fmt.Sprintf(", token: %q, token_file: %q", tok, tokFile)))
		s.mustFailParse(t, "consul token on redis", fmt.Sprintf("engines: [{name: r, kind: redis, addrs: [%q], token: %q}]", a.Addr, tok))

		// The engine key: a wrong token is refused and logged by a
		// follower; the right one flips the key.
		keySrc := func(token string) string {
			return fmt.Sprintf("engines: [{name: m, kind: memory}, {name: n, kind: memory}]\nengine_key: {consul: %q, key: cerberus-sec-engine, token: %q}\n", a.Addr, token)
		}
		s.err("engine key: SetEngineKey", config.SetEngineKey(secCtx(t, 10*time.Second), s.mustParse(t, "engine key", keySrc(tok)), "n"))
		wrongKey := s.mustParse(t, "engine key wrong", keySrc(wrong))
		err := config.SetEngineKey(secCtx(t, 10*time.Second), wrongKey, "m")
		if err == nil {
			t.Error("SetEngineKey with a wrong token succeeded")
		}
		s.err("engine key wrong: SetEngineKey", err)
		path := filepath.Join(t.TempDir(), "cerberus.yaml")
		if err := os.WriteFile(path, []byte(keySrc(wrong)), 0o600); err != nil {
			t.Fatal(err)
		}
		svc, err := config.Open(secCtx(t, 10*time.Second), path, s.slogger("config.Open"))
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(s.logText(), "engine key: read failed"); {
			if time.Now().After(deadline) {
				t.Error("the follower with a wrong token logged no refused read")
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		s.err("engine key: Close", svc.Close())

		held, err := good.Lock(secCtx(t, 10*time.Second), "sec/consul-held")
		if err != nil {
			t.Fatal(err)
		}
		a.Kill()
		mustFail(t, s, "consul killed", good, "sec/fail")
		s.err("consul killed: lease", held.Unlock(secCtx(t, 10*time.Second)))
	})

	if t.Failed() {
		return // the sanity checks below assume every step ran
	}
	logs := s.logText()
	for _, want := range []string{"cerberus: lock not acquired", "cerberus: lease lost", "WRONGPASS", "NOPERM",
		"zk: not authenticated", "ACL not found", "Permission denied", "zk: ", "engine key: read failed"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no captured log line mentions %q: the capture missed something", want)
		}
	}
	if all := s.allText(); !strings.Contains(all, "Access denied for user 'locker'") || !strings.Contains(all, "not answering") && !strings.Contains(all, "connection refused") {
		t.Errorf("the scanned errors lack the expected refusals: the capture missed something")
	}
	s.mu.Lock()
	n, secrets := len(s.texts), len(s.secrets)
	s.mu.Unlock()
	t.Logf("scanned %d texts (log lines per source: %v) for %d secrets", n, s.lines, secrets)
	for _, leak := range s.leaks() {
		t.Error(leak)
	}
}

// removeTree deletes a ZooKeeper subtree (best effort).
func removeTree(t *testing.T, addr, root string) {
	c, _, err := zk.Connect([]string{addr}, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkLogger{io.Discard}))
	if err != nil {
		return
	}
	defer c.Close()
	var rm func(p string)
	rm = func(p string) {
		kids, _, err := c.Children(p)
		if err != nil {
			return
		}
		for _, k := range kids {
			rm(p + "/" + k)
		}
		_ = c.Delete(p, -1)
	}
	rm(root)
}

// consulUUIDFrom turns a registered secret's random hex into a token in
// Consul's UUID format.
func consulUUIDFrom(secret string) string {
	h := secret[strings.LastIndexByte(secret, '-')+1:]
	h = (h + h)[:32]
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// TestZooKeeperDigestWrongCredentials adds what engine/zookeeper's
// TestDigestACL (raw clients without or with wrong credentials cannot
// delete the holder's node; the holder keeps its lease) does not show: an
// engine with wrong digest credentials, or none, gets at once a clear error
// on a key a digest-protected holder has, for every kind of attempt, and
// not one that reads as "held"; the holder keeps its lease throughout.
func TestZooKeeperDigestWrongCredentials(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	s := newLeakScanner()
	pw, wrong := s.secret(t, "zk-digest-pw"), s.secret(t, "zk-wrong-pw")
	base := "/cerberus-digest-" + s.secret(t, "base")[len("base-"):]
	t.Cleanup(func() { removeTree(t, addr, base) })
	dial := func(opts ...zookeeper.Option) engine.Engine {
		t.Helper()
		e, err := zookeeper.Dial([]string{addr},
			append([]zookeeper.Option{zookeeper.WithSessionTimeout(4 * time.Second), zookeeper.WithPrefix(base), zookeeper.WithLogger(zkLogger{s.writer("zk")})}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	holder := dial(zookeeper.WithDigest("locker", pw))
	req := engine.Request{Key: "digest/x", Mode: engine.Exclusive, TTL: 5 * time.Second, Renew: true, Wait: true}
	l, err := holder.Acquire(secCtx(t, 10*time.Second), req)
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]engine.Engine{
		"wrong password": dial(zookeeper.WithDigest("locker", wrong)),
		"wrong user":     dial(zookeeper.WithDigest("intruder", pw)),
		"no credentials": dial(),
	} {
		for _, mode := range []engine.Mode{engine.Exclusive, engine.Shared} {
			for _, wait := range []bool{false, true} {
				r := req
				r.Mode, r.Wait = mode, wait
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				got, err := e.Acquire(ctx, r)
				timedOut := ctx.Err() != nil
				cancel()
				what := fmt.Sprintf("%s, mode %v, wait %v", name, mode, wait)
				switch {
				case err == nil:
					_ = got.Release(context.Background())
					t.Errorf("%s: granted a key held under a digest ACL", what)
				case timedOut:
					t.Errorf("%s: failed only when its context ended: %v", what, err)
				case errors.Is(err, engine.ErrNotAcquired):
					t.Errorf("%s: the refusal reads as a held lock: %v", what, err)
				case !errors.Is(err, zk.ErrNoAuth) || !strings.Contains(err.Error(), "not authenticated"):
					t.Errorf("%s: want an error wrapping zk.ErrNoAuth (\"not authenticated\"), got %v", what, err)
				}
				s.err(what, err)
			}
		}
	}
	select {
	case <-l.Done():
		t.Fatalf("the holder lost its lease: %v", l.Err())
	default:
	}
	if err := l.Release(secCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("the holder's release: %v", err)
	}
	for _, leak := range s.leaks() {
		t.Error(leak)
	}
}

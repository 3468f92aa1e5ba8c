package config

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// tlsYAML is a tls section with all of f's files.
func tlsYAML(f testenv.TLS) string {
	return fmt.Sprintf("{ca_file: %q, cert_file: %q, key_file: %q, server_name: localhost}", f.CAFile, f.ClientCertFile, f.ClientKeyFile)
}

func TestTLSConfigValid(t *testing.T) {
	f := testenv.TLSFiles(t)
	src := fmt.Sprintf(`engines:
  - {name: r, kind: redis, addrs: ["127.0.0.1:6379"], tls: %[1]s}
  - {name: rc, kind: redis-cluster, addrs: ["127.0.0.1:7001"], tls: {ca_file: %[2]q}}
  - {name: rl, kind: redlock, addrs: ["127.0.0.1:6391", "127.0.0.1:6392", "127.0.0.1:6393"], tls: {insecure_skip_verify: true}}
  - {name: c, kind: consul, addrs: ["127.0.0.1:8500"], tls: %[1]s}
  - {name: m, kind: mysql, dsn: "u:p@tcp(127.0.0.1:3306)/db", tls: {}}
  - {name: z, kind: zookeeper, addrs: ["127.0.0.1:2181"]}
engine_key: {consul: "127.0.0.1:8500", key: "app/engine", token: tok-abc, tls: {ca_file: %[2]q}}
`, tlsYAML(f), f.CAFile)
	cfg, err := Parse([]byte(src), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &TLS{CAFile: f.CAFile, CertFile: f.ClientCertFile, KeyFile: f.ClientKeyFile, ServerName: "localhost"}
	if got := cfg.Engines[0].TLS; got == nil || *got != *want {
		t.Errorf("engines[0].tls = %+v, want %+v", got, want)
	}
	if got := cfg.Engines[2].TLS; got == nil || !got.InsecureSkipVerify {
		t.Errorf("engines[2].tls = %+v, want insecure_skip_verify", got)
	}
	// An empty section turns TLS on, with the system's roots.
	if got := cfg.Engines[4].TLS; got == nil || *got != (TLS{}) {
		t.Errorf("engines[4].tls ({}) = %+v, want an empty, non-nil section", got)
	}
	if cfg.Engines[5].TLS != nil {
		t.Errorf("engines[5].tls = %+v without a tls section", cfg.Engines[5].TLS)
	}
	if k := cfg.EngineKey; k.TLS == nil || k.TLS.CAFile != f.CAFile || k.ConsulToken() != "tok-abc" {
		t.Errorf("engine_key = %s, token %q", k, k.ConsulToken())
	}
	s := cfg.String()
	for _, w := range []string{`tls={ca_file: "` + f.CAFile, `server_name: "localhost"`, "tls={insecure_skip_verify: true}", "tls={})",
		`engine_key: {consul: "127.0.0.1:8500", key: "app/engine", token: "<redacted>", tls: {ca_file:`} {
		if !strings.Contains(s, w) {
			t.Errorf("String() lacks %q:\n%s", w, s)
		}
	}
	if strings.Contains(s, "tok-abc") || strings.Contains(fmt.Sprintf("%#v %+v", cfg.EngineKey, cfg.EngineKey), "tok-abc") {
		t.Errorf("the engine key's token is printed: %s", s)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	f := testenv.TLSFiles(t)
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	redis := func(tls string) string {
		return `engines: [{name: r, kind: redis, addrs: ["127.0.0.1:6379"], tls: ` + tls + `}]`
	}
	for name, c := range map[string]struct{ src, want string }{
		"missing ca_file":       {redis(fmt.Sprintf("{ca_file: %q}", missing)), "engines[0].tls.ca_file: open " + missing + ": no such file or directory"},
		"ca_file not PEM":       {redis(fmt.Sprintf("{ca_file: %q}", junk)), "engines[0].tls.ca_file: " + junk + " holds no PEM certificate"},
		"missing cert_file":     {redis(fmt.Sprintf("{cert_file: %q, key_file: %q}", missing, f.ClientKeyFile)), "engines[0].tls.cert_file: with key_file: open " + missing},
		"cert without key":      {redis(fmt.Sprintf("{cert_file: %q}", f.ClientCertFile)), "engines[0].tls.key_file: required with cert_file"},
		"key without cert":      {redis(fmt.Sprintf("{key_file: %q}", f.ClientKeyFile)), "engines[0].tls.cert_file: required with key_file"},
		"key of another cert":   {redis(fmt.Sprintf("{cert_file: %q, key_file: %q}", f.ClientCertFile, f.KeyFile)), "engines[0].tls.cert_file: with key_file: tls: private key does not match public key"},
		"insecure with ca":      {redis(fmt.Sprintf("{ca_file: %q, insecure_skip_verify: true}", f.CAFile)), "engines[0].tls.insecure_skip_verify: turns off the server verification"},
		"insecure with name":    {redis("{server_name: x, insecure_skip_verify: true}"), "engines[0].tls.insecure_skip_verify: turns off the server verification"},
		"unknown key":           {redis("{ca: x}"), "engines[0].tls.ca: unknown key"},
		"zookeeper":             {`engines: [{name: z, kind: zookeeper, addrs: ["127.0.0.1:2181"], tls: {}}]`, "engines[0].tls: not used by kind zookeeper"},
		"memory":                {`engines: [{name: m, kind: memory, tls: {}}]`, "engines[0].tls: not used by kind memory"},
		"mysql dsn sets tls":    {`engines: [{name: m, kind: mysql, dsn: "u:p@tcp(127.0.0.1:3306)/db?tls=skip-verify", tls: {}}]`, "engines[0].tls: the dsn already sets tls=skip-verify"},
		"engine_key tls":        {fmt.Sprintf(`engines: [{name: m, kind: memory}]`+"\nengine_key: {consul: \"127.0.0.1:8500\", key: k, tls: {ca_file: %q}}", missing), "engine_key.tls.ca_file: open " + missing},
		"username alone":        {`engines: [{name: r, kind: redis, addrs: ["127.0.0.1:6379"], username: u}]`, "engines[0].username: needs password, password_file or password_env"},
		"username on consul":    {`engines: [{name: c, kind: consul, addrs: ["127.0.0.1:8500"], username: u}]`, "engines[0].username: not used by kind consul"},
		"engine_key token only": {"engines: [{name: m, kind: memory}]\nengine_key: {token: abc}", "engine_key.token: set engine_key.consul and engine_key.key too"},
		"engine_key two tokens": {"engines: [{name: m, kind: memory}]\nengine_key: {consul: \"127.0.0.1:8500\", key: k, token: abc, token_env: HOME}",
			"engine_key.token: set at most one of token, token_file and token_env"},
		"engine_key token_file": {fmt.Sprintf("engines: [{name: m, kind: memory}]\nengine_key: {consul: \"127.0.0.1:8500\", key: k, token_file: %q}", missing),
			"engine_key.token_file: open " + missing},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(c.src), "yaml")
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("want ErrInvalid, got %v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("the error lacks %q:\n%v", c.want, err)
			}
		})
	}
}

// buildOne builds the only engine of src and closes it with t.
func buildOne(t *testing.T, src string) engine.Engine {
	t.Helper()
	cfg, err := Parse([]byte(src), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	built, err := cfg.Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = built[0].Engine.Close() })
	return built[0].Engine
}

// lockOnce takes and gives back one exclusive lease on e, or returns why
// it could not.
func lockOnce(e engine.Engine, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := e.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: max(5*time.Second, e.Limits().MinTTL), Renew: true, Wait: true})
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

// TestTLSBuildRedis: a redis engine built from a tls section (CA, client
// certificate, password) locks on a TLS-only server that requires client
// certificates; without the client certificate, or without tls, it cannot.
func TestTLSBuildRedis(t *testing.T) {
	f := testenv.TLSFiles(t)
	srv := testenv.StartRedis(t, append(f.RedisArgs(t, "yes"), "--requirepass", "tls-build-pw")...)
	base := fmt.Sprintf(`engines: [{name: r, kind: redis, addrs: [%q], password: tls-build-pw`, srv.Addr)
	if err := lockOnce(buildOne(t, base+", tls: "+tlsYAML(f)+"}]"), "tls/build"); err != nil {
		t.Fatalf("with tls: %v", err)
	}
	// server_name is checked: the certificate does not name "example.com".
	wrongName := fmt.Sprintf("{ca_file: %q, cert_file: %q, key_file: %q, server_name: example.com}", f.CAFile, f.ClientCertFile, f.ClientKeyFile)
	for what, src := range map[string]string{
		"no client certificate": base + fmt.Sprintf(", tls: {ca_file: %q}}]", f.CAFile),
		"no tls":                base + "}]",
		"wrong server_name":     base + ", tls: " + wrongName + "}]",
	} {
		err := lockOnce(buildOne(t, src), "tls/build")
		if err == nil || !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("%s: want ErrUnavailable, got %v", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
}

// TestTLSBuildMySQL: a mysql engine with a tls section connects as a user
// created REQUIRE SSL: Build registers the TLS configuration under a name
// derived from the engine and its tls section and adds it to the DSN.
// Without the tls section the same user is refused, and Build's error holds
// neither the password nor the DSN.
func TestTLSBuildMySQL(t *testing.T) {
	f := testenv.TLSFiles(t)
	m := testenv.StartMariaDB(t, "--ssl-cert="+f.CertFile, "--ssl-key="+f.KeyFile, "--ssl-ca="+f.CAFile)
	const pw = "tls-build-mysql-pw-Q3v"
	root, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{"CREATE USER 'locker'@'%' IDENTIFIED BY '" + pw + "' REQUIRE SSL", "GRANT ALL ON test.* TO 'locker'@'%'"} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	dsn := "locker:" + pw + "@tcp(" + m.Addr + ")/test"
	src := fmt.Sprintf("engines: [{name: db, kind: mysql, dsn: %q, tls: {ca_file: %q}}]", dsn, f.CAFile)
	cfg, err := Parse([]byte(src), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	built, err := cfg.mysqlDSNOf(t)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(built, "tls=cerberus-db-") {
		t.Errorf("the built DSN does not name the registered TLS configuration: %s", RedactDSN(built))
	}
	if err := lockOnce(buildOne(t, src), "tls/mysql"); err != nil {
		t.Fatalf("with tls: %v", err)
	}
	// Another tls section for the same engine name registers another name.
	other, err := Parse([]byte(fmt.Sprintf("engines: [{name: db, kind: mysql, dsn: %q, tls: {ca_file: %q, server_name: localhost}}]", dsn, f.CAFile)), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if b2, err := other.mysqlDSNOf(t); err != nil || b2 == built {
		t.Errorf("two tls sections share one registered name: %s, %v", RedactDSN(b2), err)
	}

	plain, err := Parse([]byte(fmt.Sprintf("engines: [{name: db, kind: mysql, dsn: %q}]", dsn)), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	err = buildMustFail(t, plain, "a REQUIRE SSL user without TLS")
	if !strings.Contains(err.Error(), "Access denied for user 'locker'") {
		t.Errorf("without tls: want Access denied, got %v", err)
	}
	for _, s := range []string{pw, dsn} {
		if strings.Contains(err.Error(), s) || strings.Contains(fmt.Sprintf("%+v", err), s) {
			t.Errorf("the Build error holds %q: %v", s, err)
		}
	}
}

// mysqlDSNOf returns the DSN Build opens for the only engine of c.
func (c *Config) mysqlDSNOf(t *testing.T) (string, error) {
	t.Helper()
	return c.Engines[0].mysqlDSN()
}

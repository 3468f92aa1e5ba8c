package config

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/internal/testenv"
)

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEngineKeyACLToken: on an agent with default_policy deny, the engine
// key's token (token_file here) lets SetEngineKey write the key and a
// Service follow it; with no token or a wrong one SetEngineKey fails with
// Consul's reason and a follower logs the refusal, and neither an error
// nor a log line holds a token.
func TestEngineKeyACLToken(t *testing.T) {
	a, mgmt := testenv.StartConsulACL(t, "")
	key := "cerberus-test/engine-key-acl"
	writer := testenv.ConsulToken(t, a.Addr, mgmt, fmt.Sprintf(`key %q { policy = "write" }`, key))
	reader := testenv.ConsulToken(t, a.Addr, mgmt, fmt.Sprintf(`key %q { policy = "read" }`, key))
	wrong := testenv.ConsulUUID(t)
	tokens := []string{mgmt, writer, reader, wrong}
	dir := t.TempDir()
	writeFile := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	configFile := func(name, tokenLine string) string {
		return writeFile(name, fmt.Sprintf(`engines:
  - {name: a, kind: memory}
  - {name: b, kind: memory}
health: {interval: 100ms}
engine_key: {consul: %q, key: %q%s}
`, a.Addr, key, tokenLine))
	}
	writerPath := configFile("writer.yaml", fmt.Sprintf(", token_file: %q", writeFile("writer.token", writer+"\n")))
	readerPath := configFile("reader.yaml", ", token_env: CERBERUS_TEST_ENGINE_KEY_TOKEN")
	t.Setenv("CERBERUS_TEST_ENGINE_KEY_TOKEN", reader)
	noTokenPath := configFile("none.yaml", "")
	wrongPath := configFile("wrong.yaml", fmt.Sprintf(", token: %q", wrong))

	load := func(p string) *Config {
		t.Helper()
		cfg, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{cfg.String(), fmt.Sprintf("%v %+v %#v", cfg, cfg.EngineKey, cfg.EngineKey)} {
			for _, tok := range tokens {
				if strings.Contains(text, tok) {
					t.Fatalf("the configuration prints a token: %s", text)
				}
			}
		}
		return cfg
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	follower, err := Open(ctx, readerPath, log)
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	refused, err := Open(ctx, noTokenPath, log)
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()

	if err := SetEngineKey(ctx, load(writerPath), "b"); err != nil {
		t.Fatalf("SetEngineKey with the writer's token: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); follower.Failover.Active() != "b"; {
		if time.Now().After(deadline) {
			t.Fatalf("the follower (reader token) did not follow the key: active %s", follower.Failover.Active())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for name, c := range map[string]struct{ path, want string }{
		"reader token": {readerPath, "Permission denied"},
		"no token":     {noTokenPath, "Permission denied"},
		"wrong token":  {wrongPath, "ACL not found"},
	} {
		err := SetEngineKey(ctx, load(c.path), "a")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "engine_key: writing "+key) {
			t.Errorf("SetEngineKey with the %s: want an engine_key error saying %q, got %v", name, c.want, err)
			continue
		}
		for _, tok := range tokens {
			if strings.Contains(fmt.Sprintf("%v %+v", err, err), tok) {
				t.Errorf("SetEngineKey's error holds a token: %v", err)
			}
		}
	}
	// The follower without a token was refused, logged why, and stayed.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "engine key: read failed"); {
		if time.Now().After(deadline) {
			t.Fatalf("no log of the refused read:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if refused.Failover.Active() == "b" {
		t.Errorf("a follower without a token followed the key")
	}
	if err := follower.Close(); err != nil {
		t.Fatal(err)
	}
	if err := refused.Close(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "Permission denied") {
		t.Errorf("the refused read's log does not say Permission denied:\n%s", out)
	}
	for _, tok := range tokens {
		if strings.Contains(out, tok) {
			t.Errorf("a log line holds a token:\n%s", out)
		}
	}
}

// TestConsulTLSBuild: a consul engine and an engine key with tls sections
// talk HTTPS to an agent's TLS port, verified with the test CA; a consul
// engine without tls on that port fails Acquire.
func TestConsulTLSBuild(t *testing.T) {
	f := testenv.TLSFiles(t)
	port := testenv.FreePort(t)
	testenv.StartConsul(t, fmt.Sprintf("ports { https = %d }", port),
		fmt.Sprintf(`tls {
  defaults {
    ca_file = %q
    cert_file = %q
    key_file = %q
    verify_incoming = false
  }
}`, f.CAFile, f.CertFile, f.KeyFile))
	https := fmt.Sprintf("127.0.0.1:%d", port)
	src := fmt.Sprintf(`engines:
  - {name: c, kind: consul, addrs: [%q], prefix: cerberus-tls-test, lock_delay: 0s, tls: {ca_file: %q}}
engine_key: {consul: %q, key: cerberus-tls-test/engine, tls: {ca_file: %q}}
`, https, f.CAFile, https, f.CAFile)
	if err := lockOnce(buildOne(t, src), "tls/consul"); err != nil {
		t.Fatalf("with tls: %v", err)
	}
	cfg, err := Parse([]byte(src), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if err := SetEngineKey(ctx, cfg, "c"); err != nil {
		t.Fatalf("SetEngineKey over TLS: %v", err)
	}
	plain := fmt.Sprintf(`engines: [{name: c, kind: consul, addrs: [%q], prefix: cerberus-tls-test}]`, https)
	if err := lockOnce(buildOne(t, plain), "tls/consul"); err == nil {
		t.Error("plain HTTP to the HTTPS port locked")
	} else {
		t.Logf("plain HTTP to the HTTPS port: %v", err)
	}
}

// TestRedisACLUserBuild: a redis engine built with username and
// password_file authenticates as a Redis ACL user that has only the rules
// package engine/redis documents, and locks; its String names the user and
// not the password.
func TestRedisACLUserBuild(t *testing.T) {
	srv := testenv.StartRedis(t)
	const adminPW, userPW = "acl-build-admin-Z2x", "acl-build-user-P7q"
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	rules := strings.Fields("ACL SETUSER locker on >" + userPW + " resetkeys ~cerberus:* resetchannels &cerberus:* nocommands " +
		"+ping +evalsha +eval +script|load +subscribe +unsubscribe +publish +client|setname +exists +get +set +del +incr " +
		"+pexpire +pexpireat +pttl +time +zadd +zrem +zscore +zcard +zcount +zrange +zrangebyscore +zremrangebyscore +lindex +lpop +lpos +lrem +rpush +hget +hset +hdel")
	args := make([]any, len(rules))
	for i, r := range rules {
		args[i] = r
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "requirepass", adminPW).Err(); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(userPW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`engines: [{name: r, kind: redis, addrs: [%q], username: locker, password_file: %q}]`, srv.Addr, pwFile)
	cfg, err := Parse([]byte(src), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.String(); !strings.Contains(s, `username="locker"`) || strings.Contains(s, userPW) {
		t.Errorf("String() = %s", s)
	}
	if err := lockOnce(buildOne(t, src), "acl/build"); err != nil {
		t.Fatalf("as the ACL user: %v", err)
	}
	wrongUser := strings.Replace(src, "username: locker", "username: nobody", 1)
	if err := lockOnce(buildOne(t, wrongUser), "acl/build"); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("as an unknown user: want WRONGPASS, got %v", err)
	}
}

// TestEngineKeyTokenNotInErrors: a configuration whose engine key token
// cannot be decoded or parsed is refused without quoting the token.
func TestEngineKeyTokenNotInErrors(t *testing.T) {
	const tok = "ek-token-R5w-9f3a1c"
	for name, src := range map[string]string{
		"decode": "engines: [{name: m, kind: memory}]\nengine_key: {consul: \"127.0.0.1:8500\", key: k, token: {nested: " + tok + "}}\n",
		"syntax": "engines: [{name: m, kind: memory}]\nengine_key: {consul: \"127.0.0.1:8500\", key: k, token: '" + tok + "\n",
		"alone":  "engines: [{name: m, kind: memory}]\nengine_key: {token: " + tok + "}\n",
	} {
		_, err := Parse([]byte(src), "yaml")
		if err == nil {
			t.Errorf("%s: Parse accepted it", name)
			continue
		}
		if strings.Contains(fmt.Sprintf("%v %+v %#v", err, err, err), tok) {
			t.Errorf("%s: the error holds the token: %v", name, err)
		}
	}
}

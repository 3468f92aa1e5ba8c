package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/etcd"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestEtcdInvalid: every bad etcd setting is reported before any I/O.
func TestEtcdInvalid(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"no addrs", "engines: [{name: e, kind: etcd}]", "engines[0].addrs: required for kind etcd"},
		{"user without password", "engines: [{name: e, kind: etcd, addrs: ['127.0.0.1:2379'], username: u}]",
			"engines[0].username: needs password"},
		{"password without user", "engines: [{name: e, kind: etcd, addrs: ['127.0.0.1:2379'], password: p}]",
			"engines[0].password: an etcd password needs a username too"},
		{"short lease", "engines: [{name: e, kind: etcd, addrs: ['127.0.0.1:2379'], session_ttl: 500ms}]",
			"engines[0].session_ttl: the etcd lease TTL must be within [1s, 24h0m0s], got 500ms"},
		{"control character", "engines: [{name: e, kind: etcd, addrs: ['127.0.0.1:2379'], prefix: \"a\\x01\"}]",
			"engines[0].prefix:"},
		{"consul's settings", "engines: [{name: e, kind: etcd, addrs: ['127.0.0.1:2379'], token: t}]",
			"engines[0].token: not used by kind etcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "yaml")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want ErrInvalid with %q, got %v", tc.want, err)
			}
		})
	}
}

// TestEtcdPasswordNeverPrinted: an etcd password from a file is resolved,
// and neither the configuration's text nor a failed call shows it.
func TestEtcdPasswordNeverPrinted(t *testing.T) {
	const secret = "etcd-pw-R5q"
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse([]byte(fmt.Sprintf(`engines:
  - {name: e, kind: etcd, addrs: ["127.0.0.1:%d"], username: locker, password_file: %s, session_ttl: 2s}
`, testenv.FreePort(t), pw)), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Engines[0].RedisPassword() != secret {
		t.Fatalf("password not resolved")
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(verb, cfg); strings.Contains(s, secret) {
			t.Errorf("Sprintf(%s) shows the password: %s", verb, s)
		}
	}
	built, err := cfg.Build(context.Background())
	if err != nil {
		t.Fatalf("Build (no I/O, nothing listens): %v", err)
	}
	defer built[0].Engine.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = built[0].Engine.Acquire(ctx, engine.Request{Key: "k", TTL: time.Minute, Renew: true})
	if !errors.Is(err, engine.ErrUnavailable) || strings.Contains(err.Error(), secret) {
		t.Errorf("Acquire with nothing listening: want ErrUnavailable without the password, got %v", err)
	}
}

// TestEtcdBuild builds an etcd engine from configuration and takes a lock
// on the test server.
func TestEtcdBuild(t *testing.T) {
	addr := testenv.EtcdAddr(t)
	cfg, err := Parse([]byte(fmt.Sprintf(`engines:
  - {name: e, kind: etcd, addrs: [%q], prefix: /cerberus-test/config/, session_ttl: 3s}
`, addr)), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	built, err := cfg.Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e := built[0].Engine
	defer e.Close()
	if _, ok := e.(*etcd.Engine); !ok {
		t.Fatalf("built %T, want *etcd.Engine", e)
	}
	if f := e.Limits().Floor; f != 4*time.Second {
		t.Errorf("Floor %v, want the 3s lease TTL plus 1s", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := e.Acquire(ctx, engine.Request{Key: t.Name(), TTL: time.Minute, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdTLS builds an etcd engine with a tls section against a server
// that speaks only TLS and requires a client certificate; without the
// certificate the same server refuses the engine.
func TestEtcdTLS(t *testing.T) {
	f := testenv.TLSFiles(t)
	srv := testenv.StartEtcdTLS(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lock := func(tlsSection string) error {
		cfg, err := Parse([]byte(fmt.Sprintf(`engines:
  - {name: e, kind: etcd, addrs: [%q], session_ttl: 3s, tls: %s}
`, srv.Addr, tlsSection)), "yaml")
		if err != nil {
			t.Fatal(err)
		}
		built, err := cfg.Build(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer built[0].Engine.Close()
		l, err := built[0].Engine.Acquire(ctx, engine.Request{Key: t.Name(), TTL: time.Minute, Renew: true})
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	if err := lock(fmt.Sprintf("{ca_file: %q, cert_file: %q, key_file: %q}", f.CAFile, f.ClientCertFile,
		f.ClientKeyFile)); err != nil {
		t.Errorf("with the client certificate: %v", err)
	}
	if err := lock(fmt.Sprintf("{ca_file: %q}", f.CAFile)); err == nil {
		t.Errorf("without the client certificate the server should refuse the engine")
	}
}

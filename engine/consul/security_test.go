package consul_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// aclPrefix is the KV folder the ACL tests lock under.
const aclPrefix = "cerberus-acl/locks"

// aclPolicy is the minimal policy documented in doc.go, for the default
// prefix; TestACLPolicyDocumented keeps the two the same.
const aclPolicy = `session_prefix "" { policy = "write" }
key_prefix "cerberus/locks/" { policy = "write" }`

func aclEngine(t *testing.T, addr string, opts ...consul.Option) *consul.Engine {
	t.Helper()
	e, err := consul.Dial(addr, append([]consul.Option{consul.WithPrefix(aclPrefix), consul.WithLockDelay(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func aclReq(key string, mode engine.Mode, wait bool) engine.Request {
	return engine.Request{Key: key, Mode: mode, TTL: time.Minute, Renew: true, Wait: wait}
}

// mustRefuse runs one Acquire on e and returns its error, which must come
// well before the 20s context ends (not a retry loop until the deadline),
// must wrap engine.ErrAccessDenied and not read as a held lock or an
// unavailable server, and must hold none of tokens.
func mustRefuse(t *testing.T, e *consul.Engine, mode engine.Mode, tokens ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	l, err := e.Acquire(ctx, aclReq("acl/refused", mode, true))
	if err == nil {
		_ = l.Release(context.Background())
		t.Fatal("Acquire succeeded")
	}
	if ctx.Err() != nil || time.Since(start) > 10*time.Second {
		t.Fatalf("Acquire failed only after %v: %v", time.Since(start), err)
	}
	if errors.Is(err, engine.ErrNotAcquired) || errors.Is(err, engine.ErrUnavailable) || !errors.Is(err, engine.ErrAccessDenied) {
		t.Errorf("a refused token: want ErrAccessDenied, not a held lock or a down server: %v", err)
	}
	for _, tok := range tokens {
		for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
			if strings.Contains(text, tok) {
				t.Fatalf("the error holds the token %q: %s", tok, text)
			}
		}
	}
	t.Logf("refused in %v: %v", time.Since(start).Round(time.Millisecond), err)
	return err
}

func TestACLPolicyDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(aclPolicy, "\n") {
		if !strings.Contains(string(doc), "//\t"+line+"\n") {
			t.Errorf("doc.go does not document the policy line %q", line)
		}
	}
}

// TestACLToken: on an agent with default_policy deny, a token with only the
// documented policy (for the engine's prefix) locks, waits, shares and
// unlocks, in both modes; no token, a wrong token, a token without session
// rights or with the wrong key prefix get a permission error at once that
// holds no token.
func TestACLToken(t *testing.T) {
	a, mgmt := testenv.StartConsulACL(t, "")
	policy := strings.Replace(aclPolicy, `"cerberus/locks/"`, `"`+aclPrefix+`/"`, 1)
	if policy == aclPolicy {
		t.Fatal("the policy names no cerberus/locks/ prefix to replace")
	}
	tok := testenv.ConsulToken(t, a.Addr, mgmt, policy)

	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			e := aclEngine(t, a.Addr, consul.WithToken(tok), consul.WithFair(fair))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			key := fmt.Sprintf("acl/fair-%v", fair)
			l, err := e.Acquire(ctx, aclReq(key, engine.Exclusive, true))
			if err != nil {
				t.Fatalf("Acquire with the token: %v", err)
			}
			if _, err := e.Acquire(ctx, aclReq(key, engine.Exclusive, false)); !errors.Is(err, engine.ErrNotAcquired) {
				t.Fatalf("second Acquire: want ErrNotAcquired, got %v", err)
			}
			got := make(chan error, 1)
			go func() {
				w, err := e.Acquire(ctx, aclReq(key, engine.Exclusive, true))
				if err == nil {
					err = w.Release(ctx)
				}
				got <- err
			}()
			select {
			case err := <-got:
				t.Fatalf("the waiter returned while the key was held: %v", err)
			case <-time.After(500 * time.Millisecond):
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if err := <-got; err != nil {
				t.Fatalf("waiter: %v", err)
			}
			r1, err := e.Acquire(ctx, aclReq(key, engine.Shared, true))
			if err != nil {
				t.Fatalf("shared Acquire: %v", err)
			}
			r2, err := e.Acquire(ctx, aclReq(key, engine.Shared, false))
			if err != nil {
				t.Fatalf("second shared Acquire: %v", err)
			}
			for _, r := range []engine.Lease{r1, r2} {
				if err := r.Release(ctx); err != nil {
					t.Fatalf("shared Release: %v", err)
				}
			}
		})
	}

	wrong := testenv.ConsulUUID(t)
	noSession := testenv.ConsulToken(t, a.Addr, mgmt, `key_prefix "`+aclPrefix+`/" { policy = "write" }`)
	otherPrefix := testenv.ConsulToken(t, a.Addr, mgmt, `session_prefix "" { policy = "write" }
key_prefix "somewhere-else/" { policy = "write" }`)
	for name, c := range map[string]struct {
		opts []consul.Option
		mode engine.Mode
		want string
	}{
		"no token":               {nil, engine.Exclusive, "Permission denied"},
		"wrong token":            {[]consul.Option{consul.WithToken(wrong)}, engine.Exclusive, "ACL not found"},
		"wrong token shared":     {[]consul.Option{consul.WithToken(wrong)}, engine.Shared, "ACL not found"},
		"no session":             {[]consul.Option{consul.WithToken(noSession)}, engine.Exclusive, "Permission denied"},
		"other key space":        {[]consul.Option{consul.WithToken(otherPrefix)}, engine.Exclusive, "Permission denied"},
		"other key space shared": {[]consul.Option{consul.WithToken(otherPrefix)}, engine.Shared, "Permission denied"},
		"other key space fair":   {[]consul.Option{consul.WithToken(otherPrefix), consul.WithFair(true)}, engine.Exclusive, "Permission denied"},
	} {
		t.Run(name, func(t *testing.T) {
			err := mustRefuse(t, aclEngine(t, a.Addr, c.opts...), c.mode, tok, wrong, mgmt, noSession, otherPrefix)
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("the error does not say %q: %v", c.want, err)
			}
		})
	}
}

// TestDialTLS: Dial with WithTLS talks HTTPS to an agent that requires
// client certificates, trusting only the test CA; without the client
// certificate, or without the CA, the agent or the client refuses.
func TestDialTLS(t *testing.T) {
	f := testenv.TLSFiles(t)
	port := testenv.FreePort(t)
	testenv.StartConsul(t, fmt.Sprintf("ports { https = %d }", port), fmt.Sprintf(`tls {
  defaults {
    ca_file = %q
    cert_file = %q
    key_file = %q
    verify_incoming = true
  }
}`, f.CAFile, f.CertFile, f.KeyFile))
	https := fmt.Sprintf("127.0.0.1:%d", port)
	lock := func(cfg api.TLSConfig) error {
		e := aclEngine(t, https, consul.WithTLS(cfg))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l, err := e.Acquire(ctx, aclReq("tls/x", engine.Exclusive, true))
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	if err := lock(api.TLSConfig{CAFile: f.CAFile, CertFile: f.ClientCertFile, KeyFile: f.ClientKeyFile}); err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	if err := lock(api.TLSConfig{CAFile: f.CAFile}); err == nil {
		t.Error("without a client certificate: locked")
	} else {
		t.Logf("without a client certificate: %v", err)
	}
	if err := lock(api.TLSConfig{CertFile: f.ClientCertFile, KeyFile: f.ClientKeyFile}); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("without the CA: want an unknown-authority error, got %v", err)
	}
}

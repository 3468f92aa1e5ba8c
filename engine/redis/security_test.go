package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// aclCommands are the command rules of the minimal ACL user documented in
// doc.go; TestACLRecipeDocumented keeps the two the same.
const aclCommands = "+ping +evalsha +eval +script|load +subscribe +unsubscribe +publish +client|setname " +
	"+exists +get +set +del +incr +pexpire +pexpireat +pttl +time +zadd +zrem +zscore +zcard +zcount +zrange +zrangebyscore +zremrangebyscore +lindex +lpop +lpos +lrem +rpush +hget +hset +hdel"

// aclRecipe is the documented ACL SETUSER line for user and password, with
// commands as its command rules.
func aclRecipe(user, password, commands string) []string {
	return append([]string{"ACL", "SETUSER", user, "on", ">" + password, "resetkeys", "~cerberus:*",
		"resetchannels", "&cerberus:*", "nocommands"}, strings.Fields(commands)...)
}

// secret returns a distinctive random secret: a hit in an error or a log
// line cannot be a coincidence.
func secret(t *testing.T, what string) string {
	t.Helper()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return what + "-" + hex.EncodeToString(b[:])
}

// secClient makes a go-redis client from o that fails fast and closes with
// t.
func secClient(t *testing.T, o goredis.Options) *goredis.Client {
	t.Helper()
	o.DialTimeout = 2 * time.Second
	c := goredis.NewClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func secEngine(t *testing.T, c Client, opts ...Option) *Engine {
	t.Helper()
	e, err := New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func secCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startWithPassword starts a private redis-server and then sets its
// default user's password (StartRedis waits for an unauthenticated PING,
// so --requirepass cannot be given at start).
func startWithPassword(t *testing.T, pw string) *testenv.RedisServer {
	t.Helper()
	srv := testenv.StartRedis(t)
	c := secClient(t, goredis.Options{Addr: srv.Addr})
	if err := c.ConfigSet(secCtx(t, 10*time.Second), "requirepass", pw).Err(); err != nil {
		t.Fatalf("CONFIG SET requirepass: %v", err)
	}
	_ = c.Close()
	return srv
}

func secReq(key string, mode engine.Mode, wait bool) engine.Request {
	return engine.Request{Key: key, Mode: mode, TTL: 5 * time.Second, Renew: true, Wait: wait}
}

// mustFailFast runs one exclusive Acquire on e and returns its error, which
// must come before the 10s context ends (no hang, no retry loop until the
// deadline) and contain none of secrets.
func mustFailFast(t *testing.T, e *Engine, secrets ...string) error {
	t.Helper()
	start := time.Now()
	l, err := e.Acquire(secCtx(t, 10*time.Second), secReq("sec/fail", engine.Exclusive, true))
	if err == nil {
		_ = l.Release(context.Background())
		t.Fatal("Acquire succeeded")
	}
	if errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 8*time.Second {
		t.Fatalf("Acquire failed only when its context ended (%v): %v", time.Since(start), err)
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("the error contains the secret %q: %v", s, err)
		}
	}
	t.Logf("failed in %v: %v", time.Since(start).Round(time.Millisecond), err)
	return err
}

// mustBeDenied fails unless err is an access-control refusal: it wraps
// engine.ErrAccessDenied, and not engine.ErrUnavailable (a wrong password is
// no outage).
func mustBeDenied(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, engine.ErrAccessDenied) || errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("%s: want ErrAccessDenied and not ErrUnavailable, got %v", what, err)
	}
}

// exercise uses every server-side path the engine has, so that a missing
// permission or a broken connection shows: Ping, exclusive grant and
// refusal, a waiter woken by pub/sub, shared leases, renewal, release, and
// the EVAL fallback after the server's script cache was flushed (flush,
// when not nil).
func exercise(t *testing.T, e *Engine, flush func()) {
	t.Helper()
	ctx := secCtx(t, 30*time.Second)
	if err := e.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	key := "sec/" + t.Name()
	const ttl = time.Second
	l, err := e.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, TTL: ttl, Renew: true, Wait: true})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if _, err := e.Acquire(ctx, secReq(key, engine.Exclusive, false)); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("second Acquire of a held key: want ErrNotAcquired, got %v", err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := e.Acquire(ctx, secReq(key, engine.Exclusive, true))
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	// Longer than the TTL: a lease that could not be renewed would be
	// lost by now.
	select {
	case err := <-got:
		t.Fatalf("the waiter returned while the key was held: %v", err)
	case <-l.Done():
		t.Fatalf("lease lost while held: %v", l.Err())
	case <-time.After(ttl + ttl/2):
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the key within 10s of its release")
	}
	if flush != nil {
		flush()
	}
	r1, err := e.Acquire(ctx, secReq(key, engine.Shared, true))
	if err != nil {
		t.Fatalf("shared Acquire: %v", err)
	}
	r2, err := e.Acquire(ctx, secReq(key, engine.Shared, false))
	if err != nil {
		t.Fatalf("second shared Acquire: %v", err)
	}
	for _, r := range []engine.Lease{r1, r2} {
		if err := r.Release(ctx); err != nil {
			t.Fatalf("shared Release: %v", err)
		}
	}
}

func TestACLRecipeDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(aclRecipe("cerberus", "PASSWORD", aclCommands), " ")
	if !strings.Contains(string(doc), want) {
		t.Fatalf("doc.go does not document the ACL recipe this test checks:\n%s", want)
	}
}

// TestAuthPassword: with requirepass, the right password locks and
// unlocks; a wrong or missing one fails Acquire at once with Redis's
// reason, and the error never holds a password.
func TestAuthPassword(t *testing.T) {
	pw := secret(t, "redis-pw")
	srv := startWithPassword(t, pw)

	exercise(t, secEngine(t, secClient(t, goredis.Options{Addr: srv.Addr, Password: pw})), nil)

	wrong := secret(t, "wrong-pw")
	err := mustFailFast(t, secEngine(t, secClient(t, goredis.Options{Addr: srv.Addr, Password: wrong})), pw, wrong)
	if !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("wrong password: the error does not say WRONGPASS: %v", err)
	}
	mustBeDenied(t, "wrong password", err)
	// Without a password, Ping says NOAUTH; the acquire script's call has
	// more arguments than Redis reads from an unauthenticated client, so
	// Redis answers that it is unauthenticated and closes the connection.
	anon := secEngine(t, secClient(t, goredis.Options{Addr: srv.Addr}))
	err = anon.Ping(secCtx(t, 10*time.Second))
	if err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("no password: Ping: want NOAUTH, got %v", err)
	}
	mustBeDenied(t, "no password: Ping", err)
	err = mustFailFast(t, anon, pw)
	if !strings.Contains(err.Error(), "NOAUTH") && !strings.Contains(err.Error(), "unauthenticated") {
		t.Errorf("no password: the error does not say NOAUTH or unauthenticated: %v", err)
	}
	mustBeDenied(t, "no password: Acquire", err)
}

// TestACLUser: an ACL user with exactly the documented rules can do
// everything the engine does, including the EVAL fallback after SCRIPT
// FLUSH and fair mode; one without EVALSHA and EVAL gets a NOPERM error
// naming the permission, and a wrong password for the user is WRONGPASS.
func TestACLUser(t *testing.T) {
	adminPW, userPW := secret(t, "admin-pw"), secret(t, "acl-pw")
	srv := startWithPassword(t, adminPW)
	admin := secClient(t, goredis.Options{Addr: srv.Addr, Password: adminPW})
	ctx := secCtx(t, time.Minute)
	setUser := func(user, commands string) {
		t.Helper()
		args := aclRecipe(user, userPW, commands)
		cmd := make([]any, len(args))
		for i, a := range args {
			cmd[i] = a
		}
		if err := admin.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("ACL SETUSER %s: %v", user, err)
		}
	}
	setUser("cerberus", aclCommands)
	user := goredis.Options{Addr: srv.Addr, Username: "cerberus", Password: userPW, ClientName: "cerberus-acl-test"}
	flush := func() {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("plain", func(t *testing.T) { exercise(t, secEngine(t, secClient(t, user)), flush) })
	t.Run("fair", func(t *testing.T) { exercise(t, secEngine(t, secClient(t, user), WithFair(true)), flush) })

	// The rules are needed: the user cannot touch keys outside the prefix.
	if err := secClient(t, user).Set(ctx, "other:key", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("SET outside the prefix as the ACL user: want NOPERM, got %v", err)
	}

	noEval := strings.NewReplacer("+evalsha ", "", "+eval ", "").Replace(aclCommands)
	if noEval == aclCommands {
		t.Fatal("the rules without EVAL are the same rules")
	}
	setUser("noeval", noEval)
	err := mustFailFast(t, secEngine(t, secClient(t, goredis.Options{Addr: srv.Addr, Username: "noeval", Password: userPW})), userPW, adminPW)
	if !strings.Contains(err.Error(), "permission") || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("a user without EVALSHA/EVAL: the error does not say NOPERM ... permission: %v", err)
	}
	mustBeDenied(t, "a user without EVALSHA/EVAL", err)

	wrong := secret(t, "wrong-acl-pw")
	err = mustFailFast(t, secEngine(t, secClient(t, goredis.Options{Addr: srv.Addr, Username: "cerberus", Password: wrong})), wrong, userPW, adminPW)
	if !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("wrong ACL password: the error does not say WRONGPASS: %v", err)
	}
	mustBeDenied(t, "wrong ACL password", err)
}

// TestTLS: a TLS-only server (--port 0) serves a client that verifies it
// with the test CA; a plain-TCP client, and a TLS client that trusts
// another CA, fail Acquire at once with a connection error, not a hang.
func TestTLS(t *testing.T) {
	f := testenv.TLSFiles(t)
	srv := testenv.StartRedis(t, f.RedisArgs(t, "no")...)
	serverOnly := f.ClientConfig()
	serverOnly.Certificates = nil
	exercise(t, secEngine(t, secClient(t, goredis.Options{Addr: srv.Addr, TLSConfig: serverOnly})), nil)

	err := mustFailFast(t, secEngine(t, secClient(t, goredis.Options{Addr: srv.Addr})))
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("plain TCP to the TLS port: want ErrUnavailable, got %v", err)
	}

	other := testenv.TLSFiles(t).ClientConfig()
	err = mustFailFast(t, secEngine(t, secClient(t, goredis.Options{Addr: srv.Addr, TLSConfig: other})))
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client trusting another CA: the error does not mention the certificate: %v", err)
	}
}

// TestMutualTLS: with --tls-auth-clients yes and a password, a client with
// the client certificate and the password locks; one without the
// certificate is refused at the handshake.
func TestMutualTLS(t *testing.T) {
	f := testenv.TLSFiles(t)
	pw := secret(t, "mtls-pw")
	srv := testenv.StartRedis(t, append(f.RedisArgs(t, "yes"), "--requirepass", pw)...)
	exercise(t, secEngine(t, secClient(t, goredis.Options{Addr: srv.Addr, Password: pw, TLSConfig: f.ClientConfig()})), nil)

	noCert := f.ClientConfig()
	noCert.Certificates = nil
	err := mustFailFast(t, secEngine(t, secClient(t, goredis.Options{Addr: srv.Addr, Password: pw, TLSConfig: noCert})), pw)
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("no client certificate: want ErrUnavailable, got %v", err)
	}
}

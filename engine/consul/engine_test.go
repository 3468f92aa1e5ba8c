package consul_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

func TestOptionsChecked(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	for name, opt := range map[string]consul.Option{
		"prefix with ..":        consul.WithPrefix("a/../b"),
		"session TTL under 10s": consul.WithSessionTTL(9 * time.Second),
		"session TTL over 24h":  consul.WithSessionTTL(25 * time.Hour),
		"negative lock-delay":   consul.WithLockDelay(-time.Second),
		"lock-delay over 60s":   consul.WithLockDelay(61 * time.Second),
		"recheck of 0":          consul.WithRecheck(0),
	} {
		if _, err := consul.New(c, opt); err == nil {
			t.Errorf("New with %s: want an error", name)
		}
	}
	if _, err := consul.New(nil); err == nil {
		t.Errorf("New(nil): want an error")
	}
}

// TestTokenNotInErrors: with the agent unreachable, errors name the
// failure but never the ACL token.
func TestTokenNotInErrors(t *testing.T) {
	const token = "b6c2d0e4-cerberus-secret"
	e, err := consul.Dial("127.0.0.1:1", consul.WithToken(token), consul.WithDatacenter("dc1"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := ctxFor(t, 5*time.Second)
	_, err = e.Acquire(ctx, try("k", engine.Exclusive))
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("Acquire on an unreachable agent: want ErrUnavailable, got %v", err)
	}
	perr := e.Ping(ctx)
	if !errors.Is(perr, engine.ErrUnavailable) {
		t.Errorf("Ping on an unreachable agent: want ErrUnavailable, got %v", perr)
	}
	for _, err := range []error{err, perr} {
		if err != nil && strings.Contains(err.Error(), token) {
			t.Errorf("error shows the ACL token: %v", err)
		}
	}
}

// TestTokenIsClock: a key's first token is the clock in 8µs ticks since
// 2025-01-01 (below 2^48), and each grant stores its token in the key's
// fencing counter, which the release keeps; exclusive and shared grants
// each take the next token, above the last.
func TestTokenIsClock(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	e := newEngine(t, addr)
	key := testKey(t)
	var last uint64
	for i, mode := range []engine.Mode{engine.Exclusive, engine.Shared, engine.Exclusive, engine.Shared} {
		before := ticks(time.Now())
		l := mustAcquire(t, e, try(key, mode))
		if after := ticks(time.Now()); i == 0 && (l.Token() < before || l.Token() > after || l.Token() >= 1<<48) {
			t.Errorf("first token %d; want the clock, between %d and %d ticks of 8µs, below 2^48", l.Token(),
				before, after)
		}
		if l.Token() <= last {
			t.Errorf("grant %d: token %d not above %d", i, l.Token(), last)
		}
		last = l.Token()
		doc, _, err := outside.KV().Get(e.KeyDir(key)+"lock", nil)
		if val := value(doc); err != nil || !strings.Contains(val, `"owner"`) ||
			!strings.Contains(val, fmt.Sprintf(`"token":%d,`, l.Token())) {
			t.Errorf("grant %d: lock document %q (%v) does not record the owner and token %d", i, val, err,
				l.Token())
		}
		if err := l.Release(ctxFor(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		fence, _, err := outside.KV().Get(e.KeyDir(key)+"fence", nil)
		if val := value(fence); err != nil || val != strconv.FormatUint(l.Token(), 10) {
			t.Fatalf("grant %d (%v): token %d, fencing counter after the release %q (%v)", i, mode, l.Token(),
				val, err)
		}
		mustBeClean(t, outside, e, key)
	}
}

// value is p's value as a string, "" for nil.
func value(p *api.KVPair) string {
	if p == nil {
		return ""
	}
	return string(p.Value)
}

// ticks is t in the fencing clock's unit: 8µs since 2025-01-01T00:00:00Z.
func ticks(t time.Time) uint64 {
	return uint64(t.Sub(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds() / 8)
}

// TestSameEngineExcludes: two leases of one engine share its session, and
// still exclude each other.
func TestSameEngineExcludes(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	e := newEngine(t, addr)
	key := testKey(t)
	l := mustAcquire(t, e, try(key, engine.Exclusive))
	for _, mode := range []engine.Mode{engine.Exclusive, engine.Shared} {
		if l2, err := e.Acquire(ctxFor(t, 5*time.Second), try(key, mode)); !errors.Is(err, engine.ErrNotAcquired) {
			if l2 != nil {
				_ = l2.Release(context.Background())
			}
			t.Errorf("%v TryLock by the holder's own engine: want ErrNotAcquired, got %v", mode, err)
		}
	}
	if err := l.Release(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	r1 := mustAcquire(t, e, try(key, engine.Shared))
	r2 := mustAcquire(t, e, try(key, engine.Shared))
	if _, err := e.Acquire(ctxFor(t, 5*time.Second), try(key, engine.Exclusive)); !errors.Is(err, engine.ErrNotAcquired) {
		t.Errorf("writer TryLock beside two readers of its own engine: want ErrNotAcquired, got %v", err)
	}
	for _, r := range []engine.Lease{r1, r2} {
		if err := r.Release(ctxFor(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCloseKeepsClient: Close leaves the caller's client usable and
// destroys the engine's session.
func TestCloseKeepsClient(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	c := newClient(t, addr)
	e, err := consul.New(c, consul.WithPrefix(testPrefix))
	if err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, e, try(testKey(t), engine.Exclusive))
	id := e.SessionID()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), engine.ErrClosed) {
		t.Errorf("lease after Close: %v, want ErrClosed", l.Err())
	}
	info, _, err := c.Session().Info(id, nil)
	if err != nil {
		t.Fatalf("client after Close: %v", err)
	}
	if info != nil {
		t.Errorf("session %s still exists after Close", id)
	}
}

// TestHealthCheckInvalidates: a session tied to a health check is
// invalidated when the check turns critical, and its leases are lost.
func TestHealthCheckInvalidates(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	checkID := "cerberus-test-" + strings.ReplaceAll(testKey(t), "/", "-")
	err := outside.Agent().CheckRegister(&api.AgentCheckRegistration{
		ID: checkID, Name: checkID,
		AgentServiceCheck: api.AgentServiceCheck{TTL: "10m", Status: api.HealthPassing},
	})
	if err != nil {
		t.Fatalf("register check: %v", err)
	}
	t.Cleanup(func() { _ = outside.Agent().CheckDeregister(checkID) })
	e := newEngine(t, addr, consul.WithLockDelay(0), consul.WithHealthChecks([]string{"serfHealth", checkID}))
	l := mustAcquire(t, e, try(testKey(t), engine.Exclusive))
	info, _, err := outside.Session().Info(e.SessionID(), nil)
	if err != nil || info == nil {
		t.Fatalf("session info: %v, %v", info, err)
	}
	if !strings.Contains(strings.Join(info.NodeChecks, ","), checkID) {
		t.Errorf("session node checks %v do not include %s", info.NodeChecks, checkID)
	}
	if err := outside.Agent().FailTTL(checkID, "test"); err != nil {
		t.Fatalf("fail check: %v", err)
	}
	waitDone(t, l, sessionTTL/2, "health check failed")
	if !errors.Is(l.Err(), engine.ErrLeaseLost) {
		t.Errorf("lease after the check failed: %v, want ErrLeaseLost", l.Err())
	}
}

// TestLongestEncodedKey: a key at the length limit made only of bytes that
// encode to three characters still works in both modes.
func TestLongestEncodedKey(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	e := newEngine(t, addr)
	base := "訂/" + strings.ReplaceAll(testKey(t), "/", ".") + "/"
	key := base + strings.Repeat("é", (engine.MaxKeyLen-len(base))/2)
	key += strings.Repeat(".", engine.MaxKeyLen-len(key))
	if len(key) != engine.MaxKeyLen {
		t.Fatalf("key is %d bytes", len(key))
	}
	for _, mode := range []engine.Mode{engine.Exclusive, engine.Shared} {
		l := mustAcquire(t, e, try(key, mode))
		if l.Key() != key {
			t.Errorf("Key() = %q", l.Key())
		}
		if err := l.Release(ctxFor(t, 5*time.Second)); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	mustBeClean(t, outside, e, key)
}

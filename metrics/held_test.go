package metrics

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestLeasesHeld: cerberus_leases_held rises at each grant and falls once
// when the lease ends, whatever ends it (Unlock, the last Unlock of nested
// leases, expiry, the hold limit, a force release, Close), on the memory
// engine and on Redis.
func TestLeasesHeld(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testLeasesHeld(t, memory.New()) })
	t.Run("redis", func(t *testing.T) { testLeasesHeld(t, redisEngine(t)) })
}

// redisEngine is a Redis engine on the test server, under a prefix of its
// own.
func redisEngine(t *testing.T) *redis.Engine {
	rc := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rc.Close() })
	e, err := redis.New(rc, redis.WithPrefix(fmt.Sprintf("%s-%d:", t.Name(), time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func testLeasesHeld(t *testing.T, eng engine.Engine) {
	m := New(nil)
	c, err := cerberus.New(eng, cerberus.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(step string, want float64) {
		t.Helper()
		if got := testutil.ToFloat64(m.held.WithLabelValues(eng.Name())); got != want {
			t.Fatalf("%s: leases_held{engine=%s} = %v; want %v", step, eng.Name(), got, want)
		}
	}
	lock := func(l *cerberus.Lease, err error) *cerberus.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	plain := make([]*cerberus.Lease, 4)
	for i := range plain {
		plain[i] = lock(c.Lock(ctx, fmt.Sprint("plain", i)))
	}
	r1, r2 := lock(c.RLock(ctx, "shared")), lock(c.RLock(ctx, "shared"))
	all := lock(c.LockAll(ctx, []string{"all1", "all2"}))
	owned := cerberus.WithOwner(ctx)
	outer := lock(c.Lock(owned, "nested"))
	inner1, inner2 := lock(c.Lock(owned, "nested")), lock(c.Lock(owned, "nested"))
	// These two end on their own, after the checks that count them held:
	// their periods leave those checks time even on a loaded machine.
	const period = 3 * time.Second
	ttl := lock(c.Lock(ctx, "ttl", cerberus.WithTTL(period)))
	limited := lock(c.Lock(ctx, "limited", cerberus.WithHoldLimit(period)))
	check("granted", 4+2+2+1+2)

	unlock := func(l *cerberus.Lease) {
		t.Helper()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	unlock(plain[0])
	unlock(r1)
	check("two unlocked", 9)
	unlock(inner1)
	unlock(inner2)
	check("inner nested leases unlocked", 9)
	unlock(outer)
	check("outer nested lease unlocked", 8)
	for _, l := range []*cerberus.Lease{ttl, limited} {
		select {
		case <-l.Done():
		case <-ctx.Done():
			t.Fatalf("lease %s did not end", l.Key())
		}
	}
	check("expired and past its hold limit", 6)
	if err := ttl.Unlock(ctx); !errors.Is(err, cerberus.ErrNotHeld) {
		t.Fatalf("Unlock of an expired lease = %v; want ErrNotHeld", err)
	}
	check("Unlock after expiry", 6)

	if _, err := engine.ReleaserOf(eng).ForceRelease(ctx, "plain1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-plain[1].Done():
	case <-ctx.Done():
		t.Fatal("the force-released lease did not end")
	}
	check("force released", 5)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	check("closed", 0)
	_ = plain[2].Unlock(ctx)
	_ = r2.Unlock(ctx)
	_ = all.Unlock(ctx)
	check("Unlock after Close", 0)
}

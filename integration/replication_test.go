package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestRedisReplicationFailoverLosesLockFencingHolds shows the one promise
// Redis with asynchronous replication cannot keep, and that fencing stops
// the damage. A grant acknowledged by the primary but not yet replicated is
// lost when the replica is promoted: a second client gets the same lock
// while the first still holds it. The fencing counter rolled back with the
// key, but the promoted replica's grant takes its token from the server's
// clock (see "Fencing tokens" in engine/redis), so the second holder's
// token is above the first's, and a fenced resource refuses every write of
// the first holder after the second's.
func TestRedisReplicationFailoverLosesLockFencingHolds(t *testing.T) {
	primary := testenv.StartRedis(t)
	// The replica replicates through a fault proxy, so the test can cut
	// the link without either server knowing.
	link := startProxy(t, primary.Addr)
	host, port, _ := strings.Cut(link.Addr(), ":")
	replica := testenv.StartRedis(t, "--replicaof", host, port)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := goredis.NewClient(&goredis.Options{Addr: replica.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, _ := rc.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not link to its primary: %s", info)
		}
	}
	pc := goredis.NewClient(&goredis.Options{Addr: primary.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = pc.Close() })
	pe, err := redis.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	a, err := cerberus.New(pe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	key := unique(t, "replication")

	// A first grant reaches the replica: the counter exists on both.
	l0, err := a.Lock(ctx, key, cerberus.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := pc.Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged (%v)", n, err)
	}

	// Replication stalls (the link drops everything); the primary grants
	// A the lock and dies.
	link.toxic(t, "timeout", map[string]any{"timeout": 0})
	la, err := a.Lock(ctx, key, cerberus.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	primary.Kill()
	if err := rc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote the replica: %v", err)
	}

	re, err := redis.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cerberus.New(re)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
	lb, err := b.TryLock(tctx, key, cerberus.WithTTL(time.Minute))
	tcancel()
	if err != nil {
		t.Fatalf("after the failover the key should be free on the promoted replica (the grant was lost), got %v", err)
	}
	select {
	case <-la.Done():
		t.Fatalf("A was told it lost the lock (%v); with the primary gone it cannot know", la.Err())
	default:
	}
	t.Logf("A holds token %d on the dead primary, B token %d on the promoted replica", la.Token(), lb.Token())
	// The counter rolled back with the key, the clock did not.
	if lb.Token() <= la.Token() {
		t.Fatalf("B's token %d is not above A's %d: the fencing counter rolled back with the lost grant", lb.Token(), la.Token())
	}

	// Both write to a fenced resource, A before B or not at all before B:
	// B's write is taken, and A's after it refused.
	for _, aFirst := range []bool{true, false} {
		f := newFence()
		if !f.take(key, l0.Token(), "first") {
			t.Fatal("the first holder's write was refused")
		}
		if aFirst && !f.take(key, la.Token(), "A") {
			t.Errorf("A's write (token %d) before B's was refused", la.Token())
		}
		if !f.take(key, lb.Token(), "B") {
			t.Errorf("B's write (token %d) was refused (A wrote first: %v)", lb.Token(), aFirst)
		}
		if f.take(key, la.Token(), "A") {
			t.Errorf("A's write (token %d) after B's (token %d) was taken (A wrote first: %v)", la.Token(), lb.Token(), aFirst)
		}
	}
}

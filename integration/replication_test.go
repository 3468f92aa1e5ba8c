package integration

import (
	"context"
	"strconv"
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
// while the first still holds it, and, because the fencing counter rolled
// back with the key, a token no larger than the first holder's. A fenced
// resource that takes only strictly larger tokens accepts exactly one of
// the two writers.
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
	// The counter rolled back with the key: B was given A's very token.
	if lb.Token() != la.Token() {
		t.Fatalf("B's token %d differs from A's %d: the fencing counter did not roll back with the lost grant", lb.Token(), la.Token())
	}

	// Both write to a fenced resource, in either order: exactly one write
	// is taken. The resource must refuse an equal token from another
	// holder: one that took any token >= the largest seen would take both.
	for _, order := range [][2]uint64{{la.Token(), lb.Token()}, {lb.Token(), la.Token()}} {
		f := newFence()
		if !f.take(key, l0.Token(), "first") {
			t.Fatal("the first holder's write was refused")
		}
		for i, tok := range order {
			f.take(key, tok, strconv.Itoa(i))
		}
		if f.accepted != 2 || f.rejected != 1 {
			t.Errorf("writes with tokens %v after %d: %d accepted, %d refused; want one of the two refused", order, l0.Token(), f.accepted-1, f.rejected)
		}
	}
}

package integration

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/etcd"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/failover"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestFailoverEtcdToRedis kills a private etcd, the primary, under 16
// busy lockers and one lease kept across the kill, with automatic failover
// and the fence on: the manager switches to Redis, every lease held at the
// kill ends (switched or lost),
// no Lock call outlives its context, and Redis grants locks after the
// switch. The timings are logged, not asserted.
func TestFailoverEtcdToRedis(t *testing.T) {
	const (
		lockers     = 16
		callTimeout = 2 * time.Second
		lease       = time.Second
	)
	srv := testenv.StartEtcd(t)
	ee, err := etcd.Dial(clientv3.Config{Endpoints: []string{srv.Addr}, Logger: zap.NewNop()},
		etcd.WithLeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rc.Close() })
	re, err := redis.New(rc, redis.WithPrefix(fmt.Sprintf("failover-etcd-%d:", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	var switchedAt atomic.Int64
	f, err := failover.New([]failover.NamedEngine{{Name: "etcd", Engine: ee}, {Name: "redis", Engine: re}},
		failover.Options{Auto: true, Fence: true, Interval: 200 * time.Millisecond, Threshold: 3,
			OnSwitch: func(failover.SwitchEvent) { switchedAt.CompareAndSwap(0, time.Now().UnixNano()) }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(f, cerberus.WithWatchdog(lease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	run := fmt.Sprintf("failover-etcd/%d", time.Now().UnixNano())
	ls := startLockers(c, lockers, 4, run, callTimeout)
	for deadline := time.Now().Add(20 * time.Second); ls.grants.Load() < 100; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			ls.stopAll()
			t.Fatalf("only %d grants on etcd before the kill", ls.grants.Load())
		}
	}
	// One lease surely held across the kill, besides the lockers' brief ones.
	kept, err := c.Lock(testContext(t), run+"/kept")
	if err != nil {
		ls.stopAll()
		t.Fatal(err)
	}
	heldAtKill := append(ls.kill(srv.Kill), kept)
	for deadline := time.Now().Add(30 * time.Second); ls.firstOnSecond.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			ls.stopAll()
			t.Fatalf("no grant on Redis within 30s of the kill (active: %s)", f.Active())
		}
	}
	ls.stopAll()
	if f.Active() != "redis" {
		t.Fatalf("active engine %s after the kill, want redis", f.Active())
	}
	mustAllEnd(t, heldAtKill, 20*time.Second)
	if n := ls.overran.Load(); n > 0 {
		t.Errorf("%d Lock calls ran past their %v context", n, callTimeout)
	}
	k := ls.killedAt.Load()
	t.Logf("%d grants; %d leases held at the kill, all ended; kill -> switch %v, kill -> first grant on Redis %v",
		ls.grants.Load(), len(heldAtKill), time.Duration(switchedAt.Load()-k), time.Duration(ls.firstOnSecond.Load()-k))
}

// TestFailoverRedisToEtcd: etcd as the secondary. A private Redis is
// killed under 16 busy lockers; the manager switches to etcd, every lease
// held at the kill ends, and etcd grants locks (see failoverPair).
func TestFailoverRedisToEtcd(t *testing.T) {
	failoverPair(t, "redis", "etcd")
}

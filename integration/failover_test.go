package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/failover"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// timingSlack is what the failover timing targets allow beyond the
// configured detection and fence: scheduling and one round trip.
const timingSlack = 100 * time.Millisecond

// TestFailoverRedisToZooKeeper kills the primary redis-server with
// automatic failover on, with two health settings, idle (detection on
// the health schedule alone) and under 64 busy lockers (failures on real
// traffic start quick probes). Every lease held at the kill ends, no Lock
// call outlives its context, the switch comes within interval x threshold
// + 100ms of the kill, and the first grant on ZooKeeper within the switch +
// the fence (the 1s lease period) + 100ms.
func TestFailoverRedisToZooKeeper(t *testing.T) {
	const lease = time.Second
	for _, tc := range []struct {
		interval  time.Duration
		threshold int
		lockers   int
	}{
		{200 * time.Millisecond, 3, 0}, {time.Second, 2, 0},
		{200 * time.Millisecond, 3, 64}, {time.Second, 2, 64},
	} {
		t.Run(fmt.Sprintf("%v x %d, %d lockers", tc.interval, tc.threshold, tc.lockers), func(t *testing.T) {
			toSwitch, toGrant, toFenceEnd := killPrimary(t, tc.interval, tc.threshold, tc.lockers, lease)
			detect := tc.interval * time.Duration(tc.threshold)
			fmt.Printf("FAILOVER %v x %d, %d lockers: kill -> switch %v (target %v), switch -> first grant %v (fence %v)\n",
				tc.interval, tc.threshold, tc.lockers, toSwitch.Round(time.Millisecond), detect+timingSlack,
				(toGrant - toSwitch).Round(time.Millisecond), lease)
			if toSwitch > detect+timingSlack {
				t.Errorf("kill -> switch %v, over interval x threshold + %v = %v", toSwitch, timingSlack, detect+timingSlack)
			}
			// Against the fence's end as the manager set it, not the time
			// OnSwitch ran: the callback may run a moment after the switch.
			if g := toGrant - toFenceEnd; g < 0 || g > timingSlack {
				t.Errorf("first grant %v after the fence's end, want within [0, %v] (switch -> first grant %v)",
					g, timingSlack, toGrant-toSwitch)
			}
		})
	}
}

// killPrimary runs lockers on a failover.Manager (Redis, then ZooKeeper; fence on,
// leases of the given period), kills the redis-server, and returns the
// times from the kill to the switch, to the first grant on ZooKeeper and
// to the end of the fence the switch set.
// With no lockers, one lease is taken and released before the kill (so the
// fence has a lease period to wait out) and one Lock after it measures the
// first grant.
func killPrimary(t *testing.T, interval time.Duration, threshold, lockers int, lease time.Duration) (toSwitch, toGrant, toFenceEnd time.Duration) {
	zkAddr := testenv.ZooKeeperAddr(t)
	srv := testenv.StartRedis(t)
	redisAddr, kill := srv.Addr, srv.Kill
	rc := goredis.NewClient(&goredis.Options{Addr: redisAddr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rc.Close() })
	re, err := redis.New(rc, redis.WithPrefix(fmt.Sprintf("failover-%d:", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	ze, err := zookeeper.Dial([]string{zkAddr}, zookeeper.WithSessionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var switchedAt, fenceEnd atomic.Int64
	f, err := failover.New([]failover.NamedEngine{{Name: "redis", Engine: re}, {Name: "zookeeper", Engine: ze}},
		failover.Options{Auto: true, Fence: true, Interval: interval, Threshold: threshold,
			OnSwitch: func(ev failover.SwitchEvent) {
				fenceEnd.Store(ev.FenceUntil.UnixNano())
				switchedAt.Store(time.Now().UnixNano())
			}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(f, cerberus.WithWatchdog(lease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	const callTimeout = 2 * time.Second
	run := fmt.Sprintf("failover/%d", time.Now().UnixNano())
	ls := startLockers(c, lockers, 8, run, callTimeout)
	if lockers == 0 {
		l, err := c.Lock(testContext(t), run+"/idle")
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(context.Background())
		ls.grants.Add(200)
	}
	// Let the lockers run on Redis, then kill it with leases held.
	for deadline := time.Now().Add(10 * time.Second); ls.grants.Load() < 200; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d grants on redis before the kill", ls.grants.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	heldAtKill := ls.kill(kill)
	if lockers == 0 {
		for deadline := time.Now().Add(20 * time.Second); switchedAt.Load() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no switch within 20s of the kill")
			}
		}
		l, err := c.Lock(testContext(t), run+"/idle")
		if err != nil {
			t.Fatal(err)
		}
		ls.firstOnSecond.Store(time.Now().UnixNano())
		_ = l.Unlock(context.Background())
	}
	for deadline := time.Now().Add(20 * time.Second); ls.firstOnSecond.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no grant on ZooKeeper within 20s of the kill (active: %s)", f.Active())
		}
		time.Sleep(5 * time.Millisecond)
	}
	ls.stopAll()

	if f.Active() != "zookeeper" {
		t.Fatalf("active engine %s after the kill, want zookeeper", f.Active())
	}
	mustAllEnd(t, heldAtKill, 10*time.Second)
	if n := ls.overran.Load(); n > 0 {
		t.Errorf("%d Lock calls ran past their %v context", n, callTimeout)
	}
	k, s, z := ls.killedAt.Load(), switchedAt.Load(), ls.firstOnSecond.Load()
	t.Logf("%d grants; %d leases held at the kill, all ended; kill -> switch %v, kill -> first grant on ZooKeeper %v",
		ls.grants.Load(), len(heldAtKill), time.Duration(s-k), time.Duration(z-k))
	return time.Duration(s - k), time.Duration(z - k), time.Duration(fenceEnd.Load() - k)
}

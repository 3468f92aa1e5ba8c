package integration

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/failover"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// section is one critical section as its holder lived it.
type section struct {
	key        string
	start, end time.Time
	epoch      uint64
}

// overlaps counts pairs of sections on one key that overlap in time.
func overlaps(secs []section) int {
	byKey := map[string][]section{}
	for _, s := range secs {
		byKey[s.key] = append(byKey[s.key], s)
	}
	n := 0
	for _, ss := range byKey {
		sort.Slice(ss, func(i, j int) bool { return ss[i].start.Before(ss[j].start) })
		var lastEnd time.Time
		for _, s := range ss {
			if s.start.Before(lastEnd) {
				n++
			}
			if s.end.After(lastEnd) {
				lastEnd = s.end
			}
		}
	}
	return n
}

// runAcrossSwitch has 16 lockers on 4 keys take fixed 1s leases and hold
// each for 400ms, ignoring Done as a paused process would, while an
// operator flips Redis -> ZooKeeper mid-run. It returns every section. The
// hold is long against a grant's latency even on a loaded machine, so
// without the fence the first grants on ZooKeeper land inside the old
// holders' sections; the lease outlives the hold, so with one engine
// sections cannot overlap at all.
func runAcrossSwitch(t *testing.T, fence bool) []section {
	t.Helper()
	rc := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rc.Close() })
	re, err := redis.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	ze, err := zookeeper.Dial([]string{testenv.ZooKeeperAddr(t)}, zookeeper.WithSessionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f, err := failover.New([]failover.NamedEngine{{Name: "redis", Engine: re}, {Name: "zookeeper", Engine: ze}},
		failover.Options{Fence: fence})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(f, cerberus.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	run := fmt.Sprintf("fence/%v/%d", fence, time.Now().UnixNano())
	var (
		mu     sync.Mutex
		secs   []section
		inside = map[string]time.Time{} // key -> start of its section in progress
		wg     sync.WaitGroup
	)
	stop := time.Now().Add(3500 * time.Millisecond)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("%s/%d", run, i%4)
			for n := 0; n < 1000 && time.Now().Before(stop); n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				l, err := c.Lock(ctx, key)
				cancel()
				if err != nil {
					continue
				}
				start := time.Now()
				mu.Lock()
				inside[key] = start
				mu.Unlock()
				time.Sleep(400 * time.Millisecond) // works on, whatever Done says
				end := time.Now()
				mu.Lock()
				delete(inside, key)
				secs = append(secs, section{key, start, end, l.Token() >> 48})
				mu.Unlock()
				_ = l.Unlock(context.Background())
			}
		}()
	}
	// Switch while every key is well inside a section (100-250ms into its
	// 400ms), so the old holders are mid-work when their leases end.
	for deadline := time.Now().Add(2500 * time.Millisecond); ; time.Sleep(2 * time.Millisecond) {
		mu.Lock()
		ready := len(inside) == 4
		for _, start := range inside {
			if d := time.Since(start); d < 100*time.Millisecond || d > 250*time.Millisecond {
				ready = false
			}
		}
		mu.Unlock()
		if ready || time.Now().After(deadline) {
			break
		}
	}
	if err := f.SetActive("zookeeper"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	return secs
}

// TestFenceNoOverlapAcrossSwitch: with the fence, no two critical sections
// on one key overlap across an operator's switch, even though the old
// holders ignore the loss of their leases. Without it, they do, which
// shows the checker can see an overlap.
func TestFenceNoOverlapAcrossSwitch(t *testing.T) {
	for _, fence := range []bool{true, false} {
		secs := runAcrossSwitch(t, fence)
		before, after := 0, 0
		for _, s := range secs {
			if s.epoch == 0 {
				before++
			} else {
				after++
			}
		}
		if before == 0 || after == 0 {
			t.Fatalf("fence=%v: %d sections before the switch and %d after; the run must span it", fence, before, after)
		}
		n := overlaps(secs)
		t.Logf("fence=%v: %d sections (%d before the switch, %d after), %d overlaps", fence, len(secs), before, after, n)
		if fence && n != 0 {
			t.Errorf("with the fence, %d critical sections overlapped across the switch", n)
		}
		if !fence && n == 0 {
			t.Errorf("without the fence no overlap was seen: the checker did not exercise the switch")
		}
	}
}

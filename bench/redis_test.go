package bench

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// redisSetup gives each benchmark its own key prefix and deletes everything
// under it afterwards (fence counters included).
func redisSetup(b *testing.B) (addr, prefix string, admin *goredis.Client) {
	b.Helper()
	addr = testenv.RedisAddr(b)
	prefix = fmt.Sprintf("cerberus-bench:%d:", time.Now().UnixNano())
	admin = goredis.NewClient(&goredis.Options{Addr: addr})
	b.Cleanup(func() {
		ctx := context.Background()
		iter := admin.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			if keys = append(keys, iter.Val()); len(keys) == 1000 {
				admin.Unlink(ctx, keys...)
				keys = keys[:0]
			}
		}
		if len(keys) > 0 {
			admin.Unlink(ctx, keys...)
		}
		_ = admin.Close()
	})
	return addr, prefix, admin
}

func newRedisClient(b *testing.B, addr string, pool int) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: pool})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func newCerberusRedis(b *testing.B, addr, prefix string, opts ...redis.Option) *cerberus.Client {
	e, err := redis.New(newRedisClient(b, addr, 4), append([]redis.Option{redis.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	c, err := cerberus.New(e)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// redisLockers builds one LockFunc per client for each library, each client
// with its own connection pool.
type redisLockers struct {
	name  string
	build func(b *testing.B, key string) LockFunc
}

func redisLibraries(addr, prefix string) []redisLockers {
	return []redisLockers{
		{"cerberus", func(b *testing.B, key string) LockFunc {
			c := newCerberusRedis(b, addr, prefix)
			return func(ctx context.Context) (func() error, error) {
				l, err := c.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Unlock(context.Background()) }, nil
			}
		}},
		{"cerberus-fair", func(b *testing.B, key string) LockFunc {
			c := newCerberusRedis(b, addr, prefix, redis.WithFair(true))
			return func(ctx context.Context) (func() error, error) {
				l, err := c.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Unlock(context.Background()) }, nil
			}
		}},
		{"redsync", func(b *testing.B, key string) LockFunc {
			rs := redsync.New(redsyncgoredis.NewPool(newRedisClient(b, addr, 4)))
			return func(ctx context.Context) (func() error, error) {
				m := rs.NewMutex(prefix + key)
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func() error { _, err := m.UnlockContext(context.Background()); return err }, nil
			}
		}},
		{"redislock", func(b *testing.B, key string) LockFunc {
			locker := redislock.New(newRedisClient(b, addr, 4))
			opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)}
			return func(ctx context.Context) (func() error, error) {
				l, err := locker.Obtain(ctx, prefix+key, 10*time.Second, opt)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(context.Background()) }, nil
			}
		}},
	}
}

// BenchmarkRedisUncontended: one client, lock+unlock cycles on one key.
func BenchmarkRedisUncontended(b *testing.B) {
	once(b, func() {
		addr, prefix, _ := redisSetup(b)
		var libs []Cycle
		for _, lib := range redisLibraries(addr, prefix) {
			if lib.name == "cerberus-fair" {
				continue
			}
			lock := lib.build(b, "uncontended/"+lib.name)
			warm(lock)
			libs = append(libs, Cycle{"redis/" + lib.name, lock})
		}
		rates := interleavedRates(b, "redis/", libs)
		Ratio(out, "redis_uncontended_cycles", "cerberus", "redislock", rates["cerberus"], rates["redislock"])
		Ratio(out, "redis_uncontended_cycles", "cerberus", "redsync", rates["cerberus"], rates["redsync"])
	})
}

// BenchmarkRedisHotKey: 16 clients on one key, 1 ms critical section.
func BenchmarkRedisHotKey(b *testing.B) {
	once(b, func() {
		addr, prefix, _ := redisSetup(b)
		res := map[string]HotKeyResult{}
		for _, lib := range redisLibraries(addr, prefix) {
			r := hotKey("redis/"+lib.name, func() LockFunc { return lib.build(b, "hot/"+lib.name) }, 30*time.Second)
			r.Report(out)
			res[lib.name] = r
		}
		Ratio(out, "redis_hotkey_acq", "cerberus", "redsync", res["cerberus"].Rate(), res["redsync"].Rate())
		Ratio(out, "redis_hotkey_acq", "cerberus", "redislock", res["cerberus"].Rate(), res["redislock"].Rate())
		// The most any lock could reach against redsync here: its own run's
		// sections back to back with no handoff.
		Ratio(out, "redis_hotkey_acq", "ceiling", "redsync", res["redsync"].Ceiling(), res["redsync"].Rate())
		Ratio(out, "redis_hotkey_wait_p99", "redsync", "cerberus", float64(res["redsync"].WaitP99), float64(res["cerberus"].WaitP99))
		Ratio(out, "redis_hotkey_wait_p99", "redsync", "cerberus-fair", float64(res["redsync"].WaitP99), float64(res["cerberus-fair"].WaitP99))
	})
}

// BenchmarkRedisAllocs: heap allocations per lock+unlock cycle.
func BenchmarkRedisAllocs(b *testing.B) {
	once(b, func() {
		addr, prefix, _ := redisSetup(b)
		allocs := map[string]float64{}
		for _, lib := range redisLibraries(addr, prefix) {
			if lib.name == "cerberus-fair" {
				continue
			}
			lock := lib.build(b, "allocs/"+lib.name)
			warm(lock)
			const n = 1000
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range n {
				u, err := lock(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if err := u(); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			a := float64(after.Mallocs-before.Mallocs) / n
			allocs[lib.name] = a
			fmt.Fprintf(out, "BENCH allocs redis/%s allocs_per_cycle=%.1f bytes_per_cycle=%.0f\n", lib.name, a, float64(after.TotalAlloc-before.TotalAlloc)/n)
		}
		Ratio(out, "redis_allocs_per_cycle", "cerberus", "redislock", allocs["cerberus"], allocs["redislock"])
	})
}

// BenchmarkRedisScale: 100,000 locks held at once from one process with
// renewal on: memory per held lock, renewal commands per second, CPU, and
// goroutines, which must not grow with the number of locks.
func BenchmarkRedisScale(b *testing.B) {
	once(b, func() {
		addr, prefix, admin := redisSetup(b)
		const n = 100_000
		watchdog := 15 * time.Second // renewed every 5s: 20,000 renewals/s for 100,000 locks
		e, err := redis.New(newRedisClient(b, addr, 32), redis.WithPrefix(prefix))
		if err != nil {
			b.Fatal(err)
		}
		c, err := cerberus.New(e, cerberus.WithWatchdog(watchdog))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		goroutinesBefore := runtime.NumGoroutine()

		leases := make([]*cerberus.Lease, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
					l, err := c.TryLock(context.Background(), fmt.Sprintf("scale/%d", i))
					if err != nil {
						b.Error(err)
						return
					}
					leases[i] = l
				}
			}()
		}
		wg.Wait()
		fmt.Fprintf(out, "BENCH scale redis/cerberus acquire_%d_s=%.2f\n", n, time.Since(start).Seconds())
		runtime.GC()
		var held runtime.MemStats
		runtime.ReadMemStats(&held)
		goroutinesHeld := runtime.NumGoroutine()

		calls := func() int64 {
			info := admin.Info(context.Background(), "commandstats").Val()
			for _, line := range strings.Split(info, "\n") {
				if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
					var v int64
					fmt.Sscanf(rest, "%d", &v)
					return v
				}
			}
			return 0
		}
		cpu := func() time.Duration {
			var ru syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		window := 10 * time.Second
		c0, cpu0, t0 := calls(), cpu(), time.Now()
		time.Sleep(window)
		c1, cpu1, el := calls(), cpu(), time.Since(t0)
		lost := 0
		for _, l := range leases {
			if l != nil && l.Err() != nil {
				lost++
			}
		}
		fmt.Fprintf(out, "BENCH scale redis/cerberus held=%d\n", n)
		fmt.Fprintf(out, "BENCH scale redis/cerberus heap_bytes_per_lock=%.0f\n", float64(int64(held.HeapAlloc)-int64(before.HeapAlloc))/n)
		fmt.Fprintf(out, "BENCH scale redis/cerberus renew_cmds_per_s=%.0f\n", float64(c1-c0)/el.Seconds())
		fmt.Fprintf(out, "BENCH scale redis/cerberus cpu_percent_while_renewing=%.1f\n", 100*float64(cpu1-cpu0)/float64(el))
		fmt.Fprintf(out, "BENCH scale redis/cerberus goroutines_before=%d goroutines_holding=%d\n", goroutinesBefore, goroutinesHeld)
		fmt.Fprintf(out, "BENCH scale redis/cerberus lost_while_held=%d\n", lost)
		for _, l := range leases {
			if l != nil {
				_ = l.Unlock(context.Background())
			}
		}
	})
}

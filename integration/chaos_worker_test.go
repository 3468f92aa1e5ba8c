package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/config"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/engine/etcd"
	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/failover"
	"github.com/cerberus-go/cerberus/internal/checker"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// workerEnv names the environment variable that turns this test binary into
// a checker worker: its value is the JSON of a workerSpec.
const workerEnv = "CERBERUS_CHECKER_WORKER"

// workerSpec is what one worker process does.
type workerSpec struct {
	Proc       int           // this worker's number
	Engine     string        // redis, redis-cluster, zookeeper, consul, mysql, mysql-row, mysql-session
	Addrs      []string      // server addresses (through the fault proxy when there is one); a DSN for mysql
	Table      string        // mysql lock table, migrated by the parent
	Prefix     string        // key prefix of this run
	Keys       int           // size of the hot key set
	Goroutines int           // lockers in this process
	Duration   time.Duration // how long to keep locking
	TTL        time.Duration // lease TTL (watchdog TTL for renewed leases)
	Hold       time.Duration // longest usual critical section before the fenced write (one in ten lasts up to 3 TTLs)
	Call       time.Duration // context timeout of every Lock and Unlock
	Fence      string        // address of the parent's fenced resource
	Out        string        // file the records are written to
	MaxOps     int           // bound on lock attempts per goroutine
	// Config, when set, is a cerberus configuration file: the worker runs
	// config.Open on it (engines, failover, engine key) instead of dialling
	// Engine, and reports where its manager ended (workerRecord.Final).
	Config string
	// HTTP, with Config, is a loopback address where the worker serves
	// its manager's Handler(true).
	HTTP string
	// HoldOne makes the worker a single holder (see runHolder) instead
	// of a locker.
	HoldOne bool
	// Primitives makes a third of the goroutines take permits of
	// semaphores of chaosPermits on the keys and another third campaign
	// in elections on them, instead of locking.
	Primitives bool
}

// chaosPermits is the size of the semaphores of a Primitives run.
const chaosPermits = 2

// workerRecord is one line of a worker's output: a section or a call.
type workerRecord struct {
	Sec  *checker.Section `json:"sec,omitempty"`
	Call *checker.Call    `json:"call,omitempty"`
	End  int64            `json:"end,omitempty"` // the worker's last line: when it stopped
	// Final, with Config, comes just before End: the manager's state.
	Final *workerFinal `json:"final,omitempty"`
}

// workerFinal is what a config-run worker's manager did.
type workerFinal struct {
	Active   string   // the active engine at the end
	Epoch    uint64   // and its epoch
	Switched int64    // unix ns of the first change of the active engine, 0 if none
	Notes    []string // every distinct fleet note seen, in order
}

// watchFailover samples f every few milliseconds until stop closes, and
// returns what it saw.
func watchFailover(f *failover.Manager, stop <-chan struct{}) *workerFinal {
	out := &workerFinal{}
	first := f.Active()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if out.Switched == 0 && f.Active() != first {
			out.Switched = time.Now().UnixNano()
		}
		if n := f.Fleet().Note; n != "" && (len(out.Notes) == 0 || out.Notes[len(out.Notes)-1] != n) {
			out.Notes = append(out.Notes, n)
		}
		select {
		case <-stop:
			out.Active, out.Epoch = f.Active(), f.Epoch()
			return out
		case <-tick.C:
		}
	}
}

// dialEngine builds the engine a worker locks through.
func dialEngine(s workerSpec) (engine.Engine, error) {
	switch s.Engine {
	case "redis":
		return redis.New(goredis.NewClient(&goredis.Options{
			Addr: s.Addrs[0], DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			MaxRetries: -1, ContextTimeoutEnabled: true,
		}))
	case "redis-sentinel":
		// Addrs are the sentinels; they name the master.
		return redis.New(goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName: testenv.SentinelMaster, SentinelAddrs: s.Addrs,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			MaxRetries: -1, ContextTimeoutEnabled: true,
		}))
	case "redlock":
		clients := make([]redis.Client, len(s.Addrs))
		for i, a := range s.Addrs {
			clients[i] = goredis.NewClient(&goredis.Options{
				Addr: a, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
				MaxRetries: -1, ContextTimeoutEnabled: true,
			})
		}
		return redis.NewRedlock(clients, redis.WithNodeOptions(redis.WithOpTimeout(time.Second)))
	case "redis-cluster":
		return redis.New(goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs: s.Addrs, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			MaxRetries: -1, ContextTimeoutEnabled: true,
		}))
	case "zookeeper":
		return zookeeper.Dial(s.Addrs, zookeeper.WithSessionTimeout(s.TTL))
	case "etcd":
		return etcd.Dial(clientv3.Config{Endpoints: s.Addrs, Logger: zap.NewNop()}, etcd.WithLeaseTTL(s.TTL))
	case "consul":
		// Consul's shortest session and no lock-delay: the engine's floor
		// is then 20s, and lease periods are raised to it (leasePeriod).
		return consul.Dial(s.Addrs[0], consul.WithSessionTTL(consulSession), consul.WithLockDelay(0))
	case "mysql":
		return mysql.Open(s.Addrs[0], mysql.WithTable(s.Table), mysql.WithOpTimeout(time.Second))
	case "mysql-row":
		return mysql.Open(s.Addrs[0], mysql.WithTable(s.Table), mysql.WithStrategy(mysql.StrategyRow), mysql.WithOpTimeout(time.Second))
	case "mysql-session":
		return mysql.Open(s.Addrs[0], mysql.WithTable(s.Table), mysql.WithStrategy(mysql.StrategySession), mysql.WithOpTimeout(time.Second))
	case "mysql-clock":
		return mysql.Open(s.Addrs[0], mysql.WithTable(s.Table), mysql.WithStrategy(mysql.StrategySession),
			mysql.WithHolderRecords(false), mysql.WithOpTimeout(time.Second))
	case "postgres", "postgres-lease", "postgres-clock":
		return dialPostgres(s)
	}
	return nil, fmt.Errorf("unknown engine %q", s.Engine)
}

// runHolder takes the key Prefix with a renewed lease of the spec's TTL
// and prints "held TOKEN"; it then waits for the lease to end (its
// process may be stopped meanwhile), prints "lost UNIXNANO ERR", tries
// its fenced write as a holder that was not told would, and prints
// "write ok|stale|none".
func runHolder(s workerSpec) error {
	e, err := dialEngine(s)
	if err != nil {
		return err
	}
	c, err := cerberus.New(e)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(); _ = e.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), s.Call)
	l, err := c.Lock(ctx, s.Prefix, cerberus.WithWatchdog(leasePeriod(c, s.TTL)))
	cancel()
	if err != nil {
		return err
	}
	fmt.Printf("held %d\n", l.Token())
	select {
	case <-l.Done():
	case <-time.After(s.Duration):
		return fmt.Errorf("the lease did not end within %v", s.Duration)
	}
	fmt.Printf("lost %d %v\n", time.Now().UnixNano(), l.Err())
	w := &worker{spec: s, http: &http.Client{Timeout: 2 * time.Second}}
	res, _ := w.fenced("write", s.Prefix, l.Token(), "holder")
	fmt.Printf("write %s\n", map[checker.Write]string{checker.Accepted: "ok", checker.Rejected: "stale", checker.NoWrite: "none"}[res])
	return nil
}

// leasePeriod is ttl, or the engine's shortest lease period if that is
// longer (Consul refuses periods below its floor).
func leasePeriod(c *cerberus.Client, ttl time.Duration) time.Duration {
	return max(ttl, c.Engine().Limits().MinTTL)
}

// workerClient builds the worker's Client: over the spec's engine, or from
// its configuration file. final, if not nil, says where the manager
// ended once called.
func workerClient(s workerSpec) (c *cerberus.Client, closer func(), final func() *workerFinal, err error) {
	if s.Config != "" {
		svc, err := config.Open(context.Background(), s.Config, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		if err != nil {
			return nil, nil, nil, err
		}
		if s.HTTP != "" {
			ln, err := net.Listen("tcp", s.HTTP)
			if err != nil {
				_ = svc.Close()
				return nil, nil, nil, err
			}
			srv := &http.Server{Handler: svc.Failover.Handler(true), ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = srv.Serve(ln) }()
		}
		stop := make(chan struct{})
		seen := make(chan *workerFinal, 1)
		go func() { seen <- watchFailover(svc.Failover, stop) }()
		final = func() *workerFinal { close(stop); return <-seen }
		return svc.Client, func() { _ = svc.Close() }, final, nil
	}
	e, err := dialEngine(s)
	if err != nil {
		return nil, nil, nil, err
	}
	if c, err = cerberus.New(e); err != nil {
		return nil, nil, nil, err
	}
	return c, func() { _ = c.Close(); _ = e.Close() }, nil, nil
}

// runWorker is a worker process's whole life: lock, work, write, unlock,
// record, until the spec's duration ends; then write the records.
func runWorker(raw string) error {
	var s workerSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return fmt.Errorf("worker spec: %w", err)
	}
	if s.HoldOne {
		return runHolder(s)
	}
	c, closer, final, err := workerClient(s)
	if err != nil {
		return err
	}
	w := &worker{spec: s, http: &http.Client{Timeout: 2 * time.Second}, final: final, period: leasePeriod(c, s.TTL)}
	stop := time.Now().Add(s.Duration)
	var wg sync.WaitGroup
	for g := range s.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(c, g, stop)
		}()
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(s.Duration + 3*s.Call + 10*time.Second):
		// Calls still in flight are written without a return time: the
		// checker counts them as hung.
	}
	err = w.write()
	go closer()
	time.Sleep(100 * time.Millisecond) // give Close a moment; a hung one is not waited for
	return err
}

type worker struct {
	spec workerSpec
	http *http.Client

	final  func() *workerFinal // nil unless the spec has a Config
	period time.Duration       // the lease period: the spec's TTL, raised to the engine's MinTTL

	mu    sync.Mutex
	secs  []checker.Section
	calls []*checker.Call
}

// call runs f with a fresh context bounded by the spec's call timeout and
// records it.
func (w *worker) call(op, key string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.spec.Call)
	defer cancel()
	dl, _ := ctx.Deadline()
	c := &checker.Call{Op: op, Key: key, Proc: w.spec.Proc, Start: time.Now().UnixNano(), Deadline: dl.UnixNano()}
	w.mu.Lock()
	w.calls = append(w.calls, c)
	w.mu.Unlock()
	err := f(ctx)
	w.mu.Lock()
	c.Return = time.Now().UnixNano()
	if err != nil {
		c.Err = err.Error()
	}
	w.mu.Unlock()
	return err
}

func (w *worker) loop(c *cerberus.Client, g int, stop time.Time) {
	// Half the lockers take renewed leases, half fixed ones.
	opt := cerberus.WithWatchdog(w.period)
	if g%2 == 1 {
		opt = cerberus.WithTTL(w.period)
	}
	kind := "lock"
	if w.spec.Primitives {
		kind = []string{"lock", "semaphore", "campaign"}[g%3]
	}
	for n := 0; n < w.spec.MaxOps && time.Now().Before(stop); n++ {
		name := fmt.Sprintf("%s/%d", w.spec.Prefix, rand.IntN(w.spec.Keys))
		holder := fmt.Sprintf("%d/%d/%d", w.spec.Proc, g, n)
		var l *cerberus.Lease
		lost := &lossClock{}
		asked := time.Now().UnixNano()
		err := w.call(kind, name, func(ctx context.Context) (err error) {
			switch kind {
			case "semaphore":
				l, err = c.Semaphore(name, chaosPermits).Acquire(ctx, opt, cerberus.WithObserver(lost))
			case "campaign":
				l, err = c.Election(name).Campaign(ctx, holder, opt, cerberus.WithObserver(lost))
			default:
				l, err = c.Lock(ctx, name, opt, cerberus.WithObserver(lost))
			}
			return err
		})
		if err != nil {
			time.Sleep(10 * time.Millisecond) // a down server must not turn this into a spin
			continue
		}
		key := l.Key() // a semaphore's or election's key differs from its name
		s := checker.Section{Key: key, Token: l.Token(), Proc: w.spec.Proc, Start: time.Now().UnixNano(), Asked: asked}
		// Most sections are short; one in ten outlasts faults and leases,
		// so that the run sees leases lost while held.
		h := rand.Int64N(int64(w.spec.Hold))
		if rand.IntN(10) == 0 {
			h = rand.Int64N(int64(3 * w.spec.TTL))
		}
		hold := time.NewTimer(time.Duration(h))
		// The section begins with a fenced operation, so that a holder
		// whose grant is older can no longer write.
		// Write records the end's write; a refused begin counts as a
		// refused write, since the holder then makes none.
		if kind == "semaphore" {
			// Permits share the key: a per-key fence would refuse the
			// older of two rightful holders, so permits make no fenced
			// write and the checker counts them (Section.Limit).
			s.Limit, s.Write = chaosPermits, checker.NoWrite
			select {
			case <-l.Done():
				s.Told = time.Now().UnixNano()
				<-hold.C
			case <-hold.C:
			}
		} else if s.Write, _ = w.fenced("begin", key, s.Token, holder); s.Write == checker.Accepted {
			s.Write = checker.NoWrite
			select {
			case <-l.Done():
				s.Told = time.Now().UnixNano()
			case <-hold.C:
			}
			if s.Told == 0 {
				select {
				case <-l.Done():
					s.Told = time.Now().UnixNano()
				default:
					s.Write, s.Wrote = w.fenced("write", key, s.Token, holder)
				}
			} else {
				// Told: it stops acting, but its section lasts as
				// planned, so the checker sees whether anyone got the
				// key before it was told.
				<-hold.C
			}
		}
		hold.Stop()
		if at := lost.at.Load(); at != 0 && s.Told != 0 {
			// The engine decided on the loss (just before Done closed)
			// before this goroutine was scheduled to see it.
			s.Told = min(s.Told, at)
		}
		s.End = time.Now().UnixNano()
		w.mu.Lock()
		w.secs = append(w.secs, s)
		w.mu.Unlock()
		_ = w.call("unlock", key, func(ctx context.Context) error {
			err := l.Unlock(ctx)
			if err != nil && s.Told != 0 {
				return nil // a lost lease cannot be unlocked: expected, not an error
			}
			return err
		})
	}
}

// lossClock notes when the engine ended a lease: its Lost runs just before
// the lease's Done closes.
type lossClock struct{ at atomic.Int64 }

func (c *lossClock) Acquired(cerberus.AcquireEvent) {}
func (c *lossClock) Lost(cerberus.LostEvent)        { c.at.CompareAndSwap(0, time.Now().UnixNano()) }

// fenced asks the parent's fenced resource to take an operation (begin or
// write) on key with token, on behalf of holder, and returns the outcome
// and, if it was accepted, when the resource took it (unix ns): the
// holder's process may be stopped before it can note anything later.
func (w *worker) fenced(op, key string, token uint64, holder string) (checker.Write, int64) {
	resp, err := w.http.Post("http://"+w.spec.Fence+"/"+op, "text/plain",
		strings.NewReader(key+" "+strconv.FormatUint(token, 10)+" "+holder))
	if err != nil {
		return checker.NoWrite, 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if at, ok := strings.CutPrefix(string(b), "ok "); ok {
		ns, _ := strconv.ParseInt(at, 10, 64)
		return checker.Accepted, ns
	}
	if string(b) == "stale" {
		return checker.Rejected, 0
	}
	return checker.NoWrite, 0
}

func (w *worker) write() error {
	f, err := os.Create(w.spec.Out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	w.mu.Lock()
	for i := range w.secs {
		_ = enc.Encode(workerRecord{Sec: &w.secs[i]})
	}
	for _, c := range w.calls {
		cp := *c
		_ = enc.Encode(workerRecord{Call: &cp})
	}
	w.mu.Unlock()
	if w.final != nil {
		_ = enc.Encode(workerRecord{Final: w.final()})
	}
	_ = enc.Encode(workerRecord{End: time.Now().UnixNano()})
	if err := bw.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

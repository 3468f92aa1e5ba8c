package redis

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

func hold(key string, ttl time.Duration) engine.Request {
	return engine.Request{Key: key, Mode: engine.Exclusive, TTL: ttl, Renew: true, Wait: true}
}

// once is hold without waiting.
func once(key string, ttl time.Duration) engine.Request {
	r := hold(key, ttl)
	r.Wait = false
	return r
}

func mustEngine(t *testing.T, c Client, opts ...Option) *Engine {
	t.Helper()
	e, err := New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestServerKilledLeasesLost kills redis-server under held leases: every
// lease learns it is lost from the first renewal sent after the kill, not
// a later one, and later calls return instead of hanging.
func TestServerKilledLeasesLost(t *testing.T) {
	srv := startServer(t)
	// go-redis retries a refused dial 5 times, 100ms apart, by default; one
	// try fails at once.
	c := &counting{Client: goredis.NewClient(&goredis.Options{Addr: srv.addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})}
	t.Cleanup(func() { _ = c.Client.(*goredis.Client).Close() })
	const ttl = 1500 * time.Millisecond // renewed every 500ms
	e := mustEngine(t, c)
	var leases []engine.Lease
	for i := range 20 {
		req := hold("killed/"+string(rune('a'+i)), ttl)
		if i%2 == 1 {
			req.Mode = engine.Shared
		}
		l, err := e.Acquire(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	killed := time.Now()
	srv.kill()
	var worst time.Duration
	for _, l := range leases {
		select {
		case <-l.Done():
		case <-time.After(10 * ttl): // a hang guard, not a speed target
			t.Fatalf("lease %q still looked held %v after the server died", l.Key(), 10*ttl)
		}
		k := e.keysOf(l.Key())
		if n := c.failures(k.w) + c.failures(k.r); n != 1 {
			t.Errorf("lease %q learnt of the loss after %d failed renewals, want the first", l.Key(), n)
		}
		worst = max(worst, time.Since(killed))
		if !errors.Is(l.Err(), engine.ErrLeaseLost) {
			t.Errorf("lease %q: Err = %v, want ErrLeaseLost", l.Key(), l.Err())
		}
	}
	t.Logf("every lease learnt it was lost within %v of the kill (renewal interval %v)", worst, ttl/3)

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.Acquire(ctx, hold("killed/after", ttl))
	if err == nil {
		t.Fatal("Acquire on a dead server succeeded")
	}
	if !errors.Is(err, engine.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire on a dead server: want ErrUnavailable or the deadline, got %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Acquire on a dead server returned after %v, past its 500ms context", took)
	}
}

// counting wraps a client and counts, per Redis key, the failed pipelines
// (the renewal loop's only use of pipelines) that carried a command on it.
type counting struct {
	Client
	mu     sync.Mutex
	failed map[string]int
}

func (c *counting) failures(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed[key]
}

func (c *counting) Pipeline() goredis.Pipeliner {
	return &countingPipe{Pipeliner: c.Client.Pipeline(), c: c}
}

type countingPipe struct {
	goredis.Pipeliner
	c *counting
}

func (p *countingPipe) Exec(ctx context.Context) ([]goredis.Cmder, error) {
	cmds, err := p.Pipeliner.Exec(ctx)
	if err != nil {
		p.c.mu.Lock()
		if p.c.failed == nil {
			p.c.failed = make(map[string]int)
		}
		for _, cmd := range cmds {
			// EVALSHA sha numkeys key ...
			if args := cmd.Args(); len(args) > 3 {
				if k, ok := args[3].(string); ok {
					p.c.failed[k]++
				}
			}
		}
		p.c.mu.Unlock()
	}
	return cmds, err
}

// frozen wraps a client so that its pipelines (the renewal loop's only way
// to the server) stop dead, as in a stop-the-world pause, until thawed.
type frozen struct {
	Client
	mu   sync.Mutex
	thaw chan struct{} // nil: not frozen
}

func (f *frozen) freeze() {
	f.mu.Lock()
	f.thaw = make(chan struct{})
	f.mu.Unlock()
}

func (f *frozen) unfreeze() {
	f.mu.Lock()
	if f.thaw != nil {
		close(f.thaw)
		f.thaw = nil
	}
	f.mu.Unlock()
}

func (f *frozen) Pipeline() goredis.Pipeliner {
	return &frozenPipe{Pipeliner: f.Client.Pipeline(), f: f}
}

type frozenPipe struct {
	goredis.Pipeliner
	f *frozen
}

func (p *frozenPipe) Exec(ctx context.Context) ([]goredis.Cmder, error) {
	p.f.mu.Lock()
	thaw := p.f.thaw
	p.f.mu.Unlock()
	if thaw != nil {
		<-thaw // a paused process does not look at its context either
	}
	return p.Pipeliner.Exec(ctx)
}

// fencedSet writes a value only with a token above the last one written:
// the fenced resource the paused holder must not be able to damage.
var fencedSet = goredis.NewScript(`
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
`)

// TestPausedHolderIsFenced stops a holder's renewals past its TTL. The next
// holder gets a larger token, and the paused holder's late write is refused
// by the fenced resource.
func TestPausedHolderIsFenced(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	fz := &frozen{Client: newClient(t, addr)}
	const ttl = 600 * time.Millisecond
	a := mustEngine(t, fz)
	t.Cleanup(fz.unfreeze) // runs before a.Close, which waits for the loop
	b := mustEngine(t, newClient(t, addr))
	key := "paused/" + t.Name() + time.Now().Format("150405.000000")
	res, fence := key+":resource", key+":fence"
	t.Cleanup(func() { admin.Del(context.Background(), res, fence) })
	write := func(l engine.Lease, v string) bool {
		n, err := fencedSet.Run(context.Background(), admin, []string{res, fence}, l.Token(), v).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	la, err := a.Acquire(ctxT(t), hold(key, ttl))
	if err != nil {
		t.Fatal(err)
	}
	if !write(la, "a1") {
		t.Fatal("the holder's first fenced write was refused")
	}
	fz.freeze()
	lb, err := b.Acquire(ctxT(t), hold(key, ttl)) // granted once a's key expires
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token after the pause %d, want > %d", lb.Token(), la.Token())
	}
	if !write(lb, "b1") {
		t.Fatal("the new holder's fenced write was refused")
	}
	// The paused holder wakes up and, not yet knowing, writes.
	if write(la, "a2") {
		t.Fatal("the paused holder's stale write was accepted")
	}
	if v := admin.Get(context.Background(), res).Val(); v != "b1" {
		t.Fatalf("resource = %q, want b1", v)
	}
	fz.unfreeze()
	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the paused holder never learnt it lost the lease")
	}
	if !errors.Is(la.Err(), engine.ErrLeaseLost) {
		t.Errorf("paused holder Err = %v, want ErrLeaseLost", la.Err())
	}
	if err := la.Release(ctxT(t)); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("paused holder's release: want ErrNotHeld, got %v", err)
	}
	if lb.Err() != nil {
		t.Errorf("the new holder lost its lease: %v", lb.Err())
	}
	_ = lb.Release(ctxT(t))
}

// TestScriptCacheFlushed: renewals and acquisitions survive SCRIPT FLUSH
// (EVALSHA falls back after NOSCRIPT).
func TestScriptCacheFlushed(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr)
	e := mustEngine(t, c)
	const ttl = 300 * time.Millisecond
	l, err := e.Acquire(ctxT(t), hold("flush/a", ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		t.Fatalf("lease lost after SCRIPT FLUSH: %v", l.Err())
	case <-time.After(4 * ttl):
	}
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	l2, err := e.Acquire(ctxT(t), hold("flush/b", ttl))
	if err != nil {
		t.Fatalf("acquire after SCRIPT FLUSH: %v", err)
	}
	for _, x := range []engine.Lease{l, l2} {
		if err := x.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSlowServerKeepsValidLeases: a server that stops answering for less
// than a lease's validity (SIGSTOP, as a saturated or swapping server
// would) makes renewals time out, not fail: the leases are renewed again
// once it answers and none is lost, while new grants are refused with
// ErrUnavailable naming the cause instead of piling on.
func TestSlowServerKeepsValidLeases(t *testing.T) {
	srv := startServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	const ttl = 3 * time.Second // renewed every second; valid for about 2.7s
	e := mustEngine(t, c, WithOpTimeout(200*time.Millisecond))
	var leases []engine.Lease
	for i := range 10 {
		l, err := e.Acquire(ctxT(t), hold("slow/"+string(rune('a'+i)), ttl))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	// Stop the server just before the first renewal, for less than the
	// validity left then.
	time.Sleep(ttl/3 - 100*time.Millisecond)
	srv.Pause()
	time.Sleep(700 * time.Millisecond)
	_, refused := e.Acquire(ctxT(t), once("slow/new", ttl))
	srv.Resume()
	if !errors.Is(refused, engine.ErrUnavailable) || !strings.Contains(refused.Error(), "renewal is falling behind") {
		t.Errorf("Acquire while renewals time out: %v, want ErrUnavailable saying renewal is falling behind", refused)
	}
	time.Sleep(ttl) // past the validity the leases had at the pause
	for i, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %d lost although the server answered again within its validity: %v", i, err)
		}
	}
	l, err := e.Acquire(ctxT(t), once("slow/new", ttl))
	if err != nil {
		t.Fatalf("Acquire once renewal keeps up again: %v", err)
	}
	_ = l.Release(ctxT(t))
	for _, l := range leases {
		_ = l.Release(ctxT(t))
	}
}

// TestCloseReleasesOnAFreshServer: Close releases its leases with one
// pipeline of EVALSHA; on a server that never ran the release scripts
// (nothing was released there before, or its script cache was flushed)
// the pipeline answers NOSCRIPT, and the keys must still be freed at
// once rather than after their lease period.
func TestCloseReleasesOnAFreshServer(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []engine.Mode{engine.Exclusive, engine.Shared} {
		if _, err := a.Acquire(ctx, engine.Request{Key: "k-" + mode.String(), Mode: mode, TTL: time.Minute,
			Renew: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := mustEngine(t, c)
	for _, mode := range []engine.Mode{engine.Exclusive, engine.Shared} {
		l, err := b.Acquire(ctx, engine.Request{Key: "k-" + mode.String(), Mode: engine.Exclusive, TTL: time.Minute})
		if err != nil {
			t.Fatalf("the %s key after Close: %v, want it free at once", mode, err)
		}
		_ = l.Release(ctx)
	}
}

// TestLostReleaseGivesTheKeyBack: a Release whose round trip the server
// does not answer (stopped with SIGSTOP) fails with ErrUnavailable, and the
// engine gives the key back once the server answers again, so that a waiter
// in another engine is granted it at once rather than after the lease's
// TTL; the key's next holder keeps it.
func TestLostReleaseGivesTheKeyBack(t *testing.T) {
	srv := startServer(t)
	const ttl = 20 * time.Second
	e := mustEngine(t, rawClient(t, srv.addr), WithOpTimeout(200*time.Millisecond))
	next := mustEngine(t, rawClient(t, srv.addr))
	l, err := e.Acquire(ctxT(t), hold("lost-release", ttl))
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	err = l.Release(ctxT(t))
	time.Sleep(300 * time.Millisecond)
	srv.Resume()
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Release on a stopped server: %v, want ErrUnavailable", err)
	}
	if !errors.Is(l.Err(), engine.ErrLeaseLost) {
		t.Errorf("lease after its failed release: %v, want ErrLeaseLost", l.Err())
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	l2, err := next.Acquire(ctx, hold("lost-release", ttl))
	if err != nil {
		t.Fatalf("a waiter after the lost release, %v later (the lease's TTL is %v): %v",
			time.Since(start).Round(time.Millisecond), ttl, err)
	}
	time.Sleep(2 * time.Second) // past the background release's last try
	if err := l2.Err(); err != nil {
		t.Fatalf("the next holder lost the key: %v", err)
	}
	if err := l2.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestWaiterOutlastsAStoppedServer: a waiting Acquire whose attempts get
// no answer, the server stopped (SIGSTOP) for less than the queue TTL,
// keeps waiting and is granted the key once its holder releases it; a
// waiter whose server stays stopped past the queue TTL fails with
// ErrUnavailable, and leaves nothing that keeps the key from the next
// waiter.
func TestWaiterOutlastsAStoppedServer(t *testing.T) {
	srv := startServer(t)
	const ttl = 20 * time.Second
	holder := mustEngine(t, rawClient(t, srv.addr))
	waiter := mustEngine(t, rawClient(t, srv.addr), WithOpTimeout(200*time.Millisecond), WithRecheck(100*time.Millisecond),
		WithQueueTTL(2*time.Second))
	wait := func(key string) (chan engine.Lease, chan error) {
		got, failed := make(chan engine.Lease, 1), make(chan error, 1)
		go func() {
			l, err := waiter.Acquire(ctxT(t), hold(key, ttl))
			if err != nil {
				failed <- err
				return
			}
			got <- l
		}()
		return got, failed
	}

	t.Run("shorter than the queue TTL", func(t *testing.T) {
		h, err := holder.Acquire(ctxT(t), hold("outlast/short", ttl))
		if err != nil {
			t.Fatal(err)
		}
		got, failed := wait("outlast/short")
		time.Sleep(300 * time.Millisecond) // queued, rechecking every 50-100ms
		srv.Pause()
		time.Sleep(time.Second) // five op timeouts
		srv.Resume()
		time.Sleep(200 * time.Millisecond)
		if err := h.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-got:
			if l.Token() <= h.Token() {
				t.Errorf("token %d after the holder's %d", l.Token(), h.Token())
			}
			_ = l.Release(ctxT(t))
		case err := <-failed:
			t.Fatalf("the waiter failed across a 1s stop of the server: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter was not granted the released key within 5s")
		}
	})

	t.Run("longer than the queue TTL", func(t *testing.T) {
		h, err := holder.Acquire(ctxT(t), hold("outlast/long", ttl))
		if err != nil {
			t.Fatal(err)
		}
		got, failed := wait("outlast/long")
		time.Sleep(300 * time.Millisecond)
		srv.Pause()
		start := time.Now()
		var werr error
		select {
		case werr = <-failed:
		case l := <-got:
			t.Fatalf("granted %v while the server was stopped", l.Key())
		case <-time.After(6 * time.Second):
		}
		srv.Resume()
		if !errors.Is(werr, engine.ErrUnavailable) {
			t.Fatalf("a waiter stopped out for %v: %v, want ErrUnavailable within 6s",
				time.Since(start).Round(time.Millisecond), werr)
		}
		if err := h.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		next := mustEngine(t, rawClient(t, srv.addr))
		ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
		defer cancel()
		l, err := next.Acquire(ctx, hold("outlast/long", ttl))
		if err != nil {
			t.Fatalf("the next waiter after the failed one: %v", err)
		}
		_ = l.Release(ctxT(t))
	})
}

// rawClient is a client of addr that never retries a command and bounds
// each by its context, so that a stopped server costs a command its
// engine's op timeout and no more; closed when the test ends.
func rawClient(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

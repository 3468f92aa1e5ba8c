package zookeeper_test

import (
	"context"
	"errors"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// permit is a waiting, renewed request for one of limit permits of key.
func permit(key string, limit int, value string) engine.Request {
	r := read(key)
	r.Limit, r.Value = limit, value
	return r
}

// notGranted fails if ch delivers within d.
func notGranted(t *testing.T, ch <-chan queuedResult, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s was granted (%v) while the permits were taken", what, r.err)
	case <-time.After(d):
	}
}

// TestCountedNoHerd queues 12 waiters for 2 permits, each on its own
// connection, behind 2 holders. Only the first waiter watches the lock
// node's children; every other watches the waiter just ahead. Each release
// then grants exactly the next waiter in queue order, and costs at most
// two watch notifications across all waiters (the first waiter's child
// watch, the poke of the next one), where a child watch per waiter would
// wake them all.
func TestCountedNoHerd(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	const n, limit = 12, 2
	key := "counted-herd"
	parent := base + "/" + zookeeper.EncodeKey(key)
	holder := dial(t, addr, zookeeper.WithPrefix(base))
	var held []engine.Lease
	for i := range limit {
		held = append(held, mustAcquire(t, holder, permit(key, limit, string(rune('a'+i)))))
	}
	type waiter struct {
		e     *zookeeper.Engine
		node  chan string
		watch chan string
	}
	type grant struct {
		i int
		l engine.Lease
	}
	grants := make(chan grant, n)
	failed := make(chan error, n)
	waiters := make([]waiter, n)
	nodes := make([]string, n)
	for i := range waiters {
		w := waiter{node: make(chan string, 4), watch: make(chan string, 256)}
		w.e = dial(t, addr, zookeeper.WithPrefix(base), zookeeper.WithRecheck(5*time.Minute),
			zookeeper.WithHooks(func(p string) { w.node <- p }, func(p string) { w.watch <- p }, nil))
		waiters[i] = w
		go func() {
			l, err := w.e.Acquire(bounded(t, 2*time.Minute), permit(key, limit, ""))
			if err != nil {
				failed <- err
				return
			}
			grants <- grant{i, l}
		}()
		select {
		case nodes[i] = <-w.node:
		case err := <-failed:
			t.Fatalf("waiter %d: %v", i, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("waiter %d did not queue", i)
		}
		want := parent // the first waiter watches the children
		if i > 0 {
			want = nodes[i-1]
		}
		waitWatch(t, w.watch, want)
	}
	events := func() int64 {
		var sum int64
		for _, w := range waiters {
			sum += w.e.NodeEvents()
		}
		return sum
	}
	before := events()
	for k := range n {
		if err := held[0].Release(bounded(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
		held = held[1:]
		select {
		case g := <-grants:
			if g.i != k {
				t.Fatalf("release %d granted waiter %d, want %d (queue order)", k, g.i, k)
			}
			held = append(held, g.l)
			if k+1 < n {
				// Poked, the next waiter lists, finds every node ahead
				// holding and watches the children.
				waitWatch(t, waiters[k+1].watch, parent)
			}
		case err := <-failed:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatalf("release %d granted no waiter", k)
		}
	}
	select {
	case g := <-grants:
		t.Fatalf("waiter %d granted with no permit free", g.i)
	default:
	}
	got := events() - before
	var pokes, listings int64
	for _, w := range waiters {
		pokes += w.e.Pokes()
		listings += w.e.Listings()
	}
	t.Logf("%d releases woke waiters %d times; %d pokes, %d listings", n, got, pokes, listings)
	if got > 2*n {
		t.Errorf("%d releases woke waiters %d times, want at most %d: a herd", n, got, 2*n)
	}
	for _, l := range held {
		if err := l.Release(bounded(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// waitWatch waits until a watching hook reports want.
func waitWatch(t *testing.T, watch <-chan string, want string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for got := ""; got != want; {
		select {
		case got = <-watch:
		case <-deadline:
			t.Fatalf("the waiter does not watch %s", path.Base(want))
		}
	}
}

// TestCountedBehindWriter: when a writer that held the key releases, the
// counted readers behind it are granted up to the limit and no further,
// although each of them learns of the release from the same notification.
func TestCountedBehindWriter(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	key := "counted-writer"
	w := mustAcquire(t, dial(t, addr, zookeeper.WithPrefix(base)), hold(key))
	var chs []<-chan queuedResult
	for range 4 {
		chs = append(chs, queue(t, addr, base, permit(key, 2, ""), nil))
	}
	time.Sleep(100 * time.Millisecond) // let them set their watches
	if err := w.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	first := granted(t, chs[0], "permit 1")
	second := granted(t, chs[1], "permit 2")
	notGranted(t, chs[2], 300*time.Millisecond, "permit 3")
	if err := first.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	third := granted(t, chs[2], "permit 3")
	notGranted(t, chs[3], 300*time.Millisecond, "permit 4")
	if err := second.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	fourth := granted(t, chs[3], "permit 4")
	for _, l := range []engine.Lease{third, fourth} {
		if err := l.Release(bounded(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCountedWaiterLeaves: a counted waiter that gives up mid-queue takes
// its node with it, and the waiter behind it moves up in order.
func TestCountedWaiterLeaves(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	key := "counted-leave"
	parent := base + "/" + zookeeper.EncodeKey(key)
	h := mustAcquire(t, dial(t, addr, zookeeper.WithPrefix(base)), permit(key, 1, "h"))
	a := queue(t, addr, base, permit(key, 1, "a"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := make(chan string, 1)
	eb := dial(t, addr, zookeeper.WithPrefix(base), zookeeper.WithHooks(func(p string) { node <- p }, nil, nil))
	b := make(chan error, 1)
	go func() {
		_, err := eb.Acquire(ctx, permit(key, 1, "b"))
		b <- err
	}()
	<-node
	c := queue(t, addr, base, permit(key, 1, "c"), nil)
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-b; !errors.Is(err, engine.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if kids := children(t, admin, parent); len(kids) != 3 {
		t.Fatalf("queue after a waiter left = %v, want 3 nodes", kids)
	}
	if err := h.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	la := granted(t, a, "a")
	notGranted(t, c, 300*time.Millisecond, "c")
	if err := la.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	lc := granted(t, c, "c")
	if err := lc.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestHoldersAndValues: the node's data is the request's Value; Holders
// lists the readers before a waiting writer with their values and tokens,
// in grant order, and not the writer, nor a counted reader over its limit.
func TestHoldersAndValues(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	key := "holders"
	parent := base + "/" + zookeeper.EncodeKey(key)
	e := dial(t, addr, zookeeper.WithPrefix(base))
	r1 := mustAcquire(t, e, permit(key, 2, "one"))
	r2 := mustAcquire(t, e, func() engine.Request { r := read(key); r.Value = "two"; return r }())
	over := permit(key, 2, "three")
	over.Wait = false
	if _, err := e.Acquire(bounded(t, 30*time.Second), over); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("a third permit of two: %v, want ErrNotAcquired", err)
	}
	wch := queue(t, addr, base, func() engine.Request { r := hold(key); r.Value = "writer"; return r }(), nil)
	for _, c := range children(t, admin, parent) {
		data, _, err := admin.Get(parent + "/" + c)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(data); s != "one" && s != "two" && s != "writer" {
			t.Errorf("node %s holds %q, want a request's value", c, s)
		}
	}
	hs, err := e.Holders(bounded(t, 30*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.Holder{{Mode: engine.Shared, Token: r1.Token(), Value: "one"},
		{Mode: engine.Shared, Token: r2.Token(), Value: "two"}}
	if len(hs) != len(want) || hs[0] != want[0] || hs[1] != want[1] {
		t.Fatalf("Holders = %+v, want %+v", hs, want)
	}
	for _, l := range []engine.Lease{r1, r2} {
		if err := l.Release(bounded(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	lw := granted(t, wch, "writer")
	hs, err = e.Holders(bounded(t, 30*time.Second), key)
	if err != nil || len(hs) != 1 || hs[0] != (engine.Holder{Mode: engine.Exclusive, Token: lw.Token(), Value: "writer"}) {
		t.Fatalf("Holders = %+v, %v; want the writer", hs, err)
	}
	if err := lw.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Holders(bounded(t, 30*time.Second), "\x00bad"); !errors.Is(err, engine.ErrInvalidKey) {
		t.Errorf("Holders of an invalid key: %v, want ErrInvalidKey", err)
	}
	_ = e.Close()
	if _, err := e.Holders(bounded(t, 30*time.Second), key); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Holders after Close: %v, want ErrClosed", err)
	}
}

// notified waits up to d for a notification on ch.
func notified(ch <-chan struct{}, d time.Duration) bool {
	select {
	case _, ok := <-ch:
		return ok
	case <-time.After(d):
		return false
	}
}

// drain empties ch.
func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestWatch: a watch on a key whose lock node does not exist yet tells of
// the first grant and of a release, is quiet while nothing changes, ends
// when its context does or the engine closes.
func TestWatch(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	key := "watched"
	e := dial(t, addr, zookeeper.WithPrefix(base))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := e.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let it set its watch
	other := dial(t, addr, zookeeper.WithPrefix(base))
	l := mustAcquire(t, other, hold(key))
	if !notified(ch, 10*time.Second) {
		t.Fatal("no notification of the first grant of a key")
	}
	time.Sleep(100 * time.Millisecond)
	drain(ch)
	if notified(ch, 300*time.Millisecond) {
		t.Error("a notification while nothing changed")
	}
	if err := l.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !notified(ch, 10*time.Second) {
		t.Fatal("no notification of a release")
	}
	cancel()
	deadline := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline:
			t.Fatal("the channel stayed open after its context ended")
		}
	}
	ch2, err := e.Watch(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Watch(context.Background(), ""); !errors.Is(err, engine.ErrInvalidKey) {
		t.Errorf("Watch of an empty key: %v, want ErrInvalidKey", err)
	}
	_ = e.Close()
	deadline = time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch2:
		case <-deadline:
			t.Fatal("the channel stayed open after Close")
		}
	}
	if _, err := e.Watch(context.Background(), key); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Watch after Close: %v, want ErrClosed", err)
	}
}

// TestWatchAfterReconnect: a connection that drops and comes back on the
// same session may have missed a change, so the watch tells once it is
// back, although nothing changed on the key.
func TestWatchAfterReconnect(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	px := newProxy(t, addr)
	hook, sess := sessionEvents()
	e := dialTimeout(t, px.addr(), 20*time.Second, hook, zookeeper.WithPrefix(base))
	key := "watched-reconnect"
	l := mustAcquire(t, e, hold(key))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := e.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	drain(ch)
	px.partition()
	waitSession(t, sess, false, 30*time.Second)
	px.heal()
	waitSession(t, sess, true, 30*time.Second)
	if !notified(ch, 10*time.Second) {
		t.Fatal("no notification after the session came back")
	}
	if _, _, err := admin.Children(base); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	if err := l.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !notified(ch, 10*time.Second) {
		t.Fatal("no notification of a release after the reconnect")
	}
}

// TestCountedCrashedHolder cuts the holder of one of 2 permits off the
// server: its permit frees itself when the server expires its session,
// and goes to the waiter only once the cut-off holder has given its lease
// up, so never more than 2 hold at once.
func TestCountedCrashedHolder(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	px := newProxy(t, addr)
	const timeout = 4 * time.Second
	key := "counted-crash"
	a := dialTimeout(t, px.addr(), timeout, zookeeper.WithPrefix(base))
	b := dialTimeout(t, addr, timeout, zookeeper.WithPrefix(base))
	la := mustAcquire(t, a, permit(key, 2, "a"))
	lb := mustAcquire(t, b, permit(key, 2, "b"))
	type grant struct {
		l     engine.Lease
		err   error
		aGone bool // the cut-off holder's Done had closed at the grant
	}
	got := make(chan grant, 1)
	node := make(chan string, 1)
	c := dialTimeout(t, addr, timeout, zookeeper.WithPrefix(base), zookeeper.WithHooks(func(p string) { node <- p }, nil, nil))
	go func() {
		l, err := c.Acquire(bounded(t, time.Minute), permit(key, 2, "c"))
		got <- grant{l: l, err: err, aGone: isDone(la)}
	}()
	<-node
	notGranted := func() {
		select {
		case g := <-got:
			t.Fatalf("a third permit of 2 granted while both are held: %v", g.err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	notGranted()
	start := time.Now()
	px.partition()
	var g grant
	select {
	case g = <-got:
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not granted after the holder's session expired")
	}
	if g.err != nil {
		t.Fatal(g.err)
	}
	t.Logf("permit of a cut-off holder granted again %v after the cut (session timeout %v)",
		time.Since(start).Round(10*time.Millisecond), timeout)
	if !g.aGone {
		t.Error("the waiter was granted while the cut-off holder still reported its permit")
	}
	if !errors.Is(la.Err(), engine.ErrLeaseLost) {
		t.Errorf("cut-off permit Err() = %v, want ErrLeaseLost", la.Err())
	}
	hs, err := b.Holders(bounded(t, 30*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Value != "b" || hs[1].Value != "c" || hs[1].Token != g.l.Token() {
		t.Errorf("Holders after the expiry = %+v, want b then c", hs)
	}
	for _, l := range []engine.Lease{lb, g.l} {
		if err := l.Release(bounded(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// getHook is a connection whose first Get runs a function before it reads.
type getHook struct {
	*zk.Conn
	once   sync.Once
	before func()
}

func (c *getHook) Get(path string) ([]byte, *zk.Stat, error) {
	c.once.Do(c.before)
	return c.Conn.Get(path)
}

// TestHoldersRelistsAfterChange: when the leader releases between Holders'
// listing and its read of the leader's node, Holders lists again and
// reports the next leader rather than no one.
func TestHoldersRelistsAfterChange(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	key := "holders-change"
	la := mustAcquire(t, dial(t, addr, zookeeper.WithPrefix(base)), hold(key))
	next := queue(t, addr, base, func() engine.Request { r := hold(key); r.Value = "next"; return r }(), nil)
	var lb engine.Lease
	conn, events, err := zk.Connect([]string{addr}, testTimeout, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	hook := &getHook{Conn: conn, before: func() {
		if err := la.Release(bounded(t, 30*time.Second)); err != nil {
			t.Error(err)
		}
		lb = granted(t, next, "the next leader")
	}}
	e, err := zookeeper.New(hook, events, zookeeper.WithPrefix(base))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	hs, err := e.Holders(bounded(t, 30*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	if lb == nil {
		t.Fatal("the hook did not run")
	}
	want := engine.Holder{Mode: engine.Exclusive, Token: lb.Token(), Value: "next"}
	if len(hs) != 1 || hs[0] != want {
		t.Errorf("Holders = %+v, want %+v", hs, want)
	}
	if err := lb.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
}

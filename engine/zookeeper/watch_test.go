package zookeeper_test

import (
	"context"
	"fmt"
	"path"
	"runtime"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestOneWatchPerRelease queues 50 waiters, each on its own connection,
// behind a holder. Every release must wake exactly one of them (one watch
// notification across all connections: no herd), in queue order, and none
// needs a second listing of the queue to know its turn has come.
func TestOneWatchPerRelease(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	const n = 50
	key := "herd"
	holder := dial(t, addr, zookeeper.WithPrefix(base))
	first := mustAcquire(t, holder, try(key))

	type waiter struct {
		e     *zookeeper.Engine
		node  chan string // its queue node
		watch chan string // the node it watches
	}
	type grant struct {
		i int
		l engine.Lease
	}
	granted := make(chan grant, n)
	failed := make(chan error, n)
	waiters := make([]waiter, n)
	for i := range waiters {
		w := waiter{node: make(chan string, 4), watch: make(chan string, 16)}
		w.e = dial(t, addr, zookeeper.WithPrefix(base), zookeeper.WithRecheck(5*time.Minute),
			zookeeper.WithHooks(func(p string) { w.node <- p }, func(p string) { w.watch <- p }, nil))
		waiters[i] = w
	}
	// Queue them one after another so queue order is index order, and wait
	// until each has set its watch on the one before it.
	nodes := make([]string, n)
	prev := ""
	for i, w := range waiters {
		go func() {
			l, err := w.e.Acquire(bounded(t, 2*time.Minute), hold(key))
			if err != nil {
				failed <- err
				return
			}
			granted <- grant{i, l}
		}()
		select {
		case nodes[i] = <-w.node:
		case err := <-failed:
			t.Fatalf("waiter %d: %v", i, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("waiter %d did not queue", i)
		}
		select {
		case watched := <-w.watch:
			if i > 0 && watched != prev {
				t.Fatalf("waiter %d watches %s, want its predecessor %s", i, path.Base(watched), path.Base(prev))
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("waiter %d did not set a watch", i)
		}
		prev = nodes[i]
	}
	events := func() int64 {
		var sum int64
		for _, w := range waiters {
			sum += w.e.NodeEvents()
		}
		return sum
	}
	if got := events(); got != 0 {
		t.Fatalf("%d watch notifications before any release", got)
	}

	release := first
	for i := range n {
		if err := release.Release(bounded(t, 30*time.Second)); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		var g grant
		select {
		case g = <-granted:
		case err := <-failed:
			t.Fatalf("a waiter failed: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatalf("no waiter was granted after release %d", i)
		}
		if g.i != i {
			t.Errorf("release %d granted waiter %d, want %d (queue order)", i, g.i, i)
		}
		// The notification that woke the waiter was counted before it was
		// granted; a herd would show every waiter's notification here.
		if got := events(); got != int64(i+1) {
			t.Fatalf("after %d releases: %d watch notifications, want exactly %d", i+1, got, i+1)
		}
		select {
		case other := <-granted:
			t.Fatalf("release %d granted a second waiter (%d) while %d holds", i, other.i, g.i)
		default:
		}
		release = g.l
	}
	if err := release.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Every release was a writer's: its successor knew it was at the head
	// without listing again (see releaseNode), so each waiter listed the
	// queue only once, when it joined.
	for i, w := range waiters {
		if got := w.e.Listings(); got != 1 {
			t.Errorf("waiter %d listed the queue %d times, want 1", i, got)
		}
	}
	if left, err := leftovers(admin, base, key); err != nil || len(left) > 0 {
		t.Errorf("leftovers after every waiter released: %v %v", left, err)
	}
}

// TestWatchSeesAChangeRightAfterIt: a grant made the moment Watch returns
// is reported, however late the watch's goroutine gets going (Watch sets
// the server's watch before it returns while the session is up).
func TestWatchSeesAChangeRightAfterIt(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	base := testBase(t, rawConn(t, addr))
	e := dial(t, addr, zookeeper.WithPrefix(base))
	// One P, and the grant on the watching engine's own connection: the
	// grant's request goes out before the watch goroutine can run, as on
	// a loaded machine.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for i := range 20 {
		key := fmt.Sprintf("right-after-%d", i)
		// The key's lock node exists already (a grant made it), so only
		// the child watch can tell the grant below.
		if err := mustAcquire(t, e, try(key)).Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bounded(t, time.Minute), 5*time.Second)
		ch, err := e.Watch(ctx, key)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		l := mustAcquire(t, e, try(key))
		select {
		case _, ok := <-ch:
			if !ok {
				t.Errorf("round %d: the watch closed instead of reporting the grant", i)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("round %d: the grant made right after Watch returned was not reported in 3s", i)
		}
		_ = l.Release(context.Background())
		cancel()
		for range ch {
		}
	}
}

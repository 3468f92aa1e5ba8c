package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/etcd"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// hang bounds every wait in these tests: a liveness limit, not a speed
// target.
const hang = 20 * time.Second

var keyN atomic.Int64

// testKey returns a key unique to the test and the run.
func testKey(t *testing.T) string {
	return fmt.Sprintf("etcd-test/%s/%d/%d", t.Name(), time.Now().UnixNano(), keyN.Add(1))
}

// engines dials n engines on the test server, closed when the test ends.
func engines(t *testing.T, n int) []*etcd.Engine {
	t.Helper()
	addr := testenv.EtcdAddr(t)
	out := make([]*etcd.Engine, n)
	for i := range out {
		e, err := dial(clientv3.Config{Endpoints: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		out[i] = e
	}
	return out
}

func permit(key string, limit int, value string) engine.Request {
	return engine.Request{Key: key, Mode: engine.Shared, Limit: limit, Value: value, TTL: time.Minute,
		Renew: true, Wait: true}
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	t.Cleanup(cancel)
	return ctx
}

// TestCountedHolders takes every permit of a three-permit key from three
// engines: a fourth is refused, Holders lists the three in grant order with
// their values, and a waiter gets the permit the first one gives back.
func TestCountedHolders(t *testing.T) {
	es := engines(t, 4)
	admin := adminClient(t)
	key := testKey(t)
	ctx := bounded(t)
	var held []engine.Lease
	for i := range 3 {
		l, err := es[i].Acquire(ctx, permit(key, 3, fmt.Sprintf("worker-%d", i)))
		if err != nil {
			t.Fatalf("permit %d: %v", i, err)
		}
		held = append(held, l)
	}
	try := permit(key, 3, "late")
	try.Wait = false
	if l, err := es[3].Acquire(ctx, try); !errors.Is(err, engine.ErrNotAcquired) {
		if l != nil {
			_ = l.Release(ctx)
		}
		t.Fatalf("a fourth permit of three: want ErrNotAcquired, got %v", err)
	}
	hs, err := es[3].Holders(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 3 {
		t.Fatalf("Holders: %d, want 3: %+v", len(hs), hs)
	}
	for i, h := range hs {
		want := engine.Holder{Mode: engine.Shared, Token: held[i].Token(), Value: fmt.Sprintf("worker-%d", i)}
		if h != want {
			t.Errorf("holder %d: %+v, want %+v", i, h, want)
		}
	}
	got := make(chan engine.Lease, 1)
	go func() {
		l, err := es[3].Acquire(ctx, permit(key, 3, "waiter"))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	waitFor(t, func() bool { // the waiter's entry is queued, not holding
		hs, _ := es[0].Holders(ctx, key)
		n, _ := queueLen(ctx, admin, key)
		return len(hs) == 3 && n == 4
	})
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	var l engine.Lease
	select {
	case l = <-got:
	case <-time.After(hang):
		t.Fatal("the waiter did not get the freed permit")
	}
	if l == nil {
		t.FailNow()
	}
	hs, err = es[0].Holders(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 3 || hs[2].Value != "waiter" || hs[2].Token != l.Token() {
		t.Errorf("Holders after the hand-off: %+v, want the waiter last of 3", hs)
	}
	for _, l := range append(held[1:], l) {
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestCountedNeverAboveLimit has 8 engines take permits of a two-permit
// key in turn: at no time do more than two hold one, and the pair is
// reached.
func TestCountedNeverAboveLimit(t *testing.T) {
	const clients, rounds, limit = 8, 15, 2
	es := engines(t, clients)
	admin := adminClient(t)
	key := testKey(t)
	ctx := bounded(t)
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := e.Acquire(ctx, permit(key, limit, fmt.Sprint(i)))
				if err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				n := inside.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(2 * time.Millisecond) // hold it a little, so that holds overlap
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("client %d: release: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > limit || m < limit {
		t.Errorf("most permits held at once: %d, want %d", m, limit)
	}
	if n, err := queueLen(ctx, admin, key); err != nil || n != 0 {
		t.Errorf("entries left: %d (%v)", n, err)
	}
}

// TestExclusiveHolderValue: an election's leader is the exclusive holder,
// and its value is what Holders reports; a waiter is not a holder.
func TestExclusiveHolderValue(t *testing.T) {
	es := engines(t, 2)
	admin := adminClient(t)
	key := testKey(t)
	ctx := bounded(t)
	req := engine.Request{Key: key, Mode: engine.Exclusive, TTL: time.Minute, Renew: true, Wait: true,
		Value: "pod-7"}
	l, err := es[0].Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		r := req
		r.Value = "pod-8"
		_, err := es[1].Acquire(wctx, r)
		waited <- err
	}()
	waitFor(t, func() bool { n, _ := queueLen(ctx, admin, key); return n == 2 })
	hs, err := es[1].Holders(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Holder{Mode: engine.Exclusive, Token: l.Token(), Value: "pod-7"}
	if len(hs) != 1 || hs[0] != want {
		t.Errorf("Holders: %+v, want [%+v]", hs, want)
	}
	cancel()
	if err := <-waited; !errors.Is(err, engine.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if hs, err := es[1].Holders(ctx, key); err != nil || len(hs) != 0 {
		t.Errorf("Holders of a free key: %+v, %v", hs, err)
	}
}

// TestWatch: a watch reports a grant and a release, and closes with its
// context.
func TestWatch(t *testing.T) {
	es := engines(t, 2)
	key := testKey(t)
	ctx := bounded(t)
	wctx, cancel := context.WithCancel(ctx)
	ch, err := es[0].Watch(wctx, key)
	if err != nil {
		t.Fatal(err)
	}
	expect := func(what string) {
		t.Helper()
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the watch closed", what)
			}
		case <-time.After(hang):
			t.Fatalf("%s: no notification", what)
		}
	}
	l, err := es[1].Acquire(ctx, engine.Request{Key: key, TTL: time.Minute, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	expect("grant")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	expect("release")
	cancel()
	for range ch { // drains what is left, then sees the close
	}
	if _, err := es[0].Watch(ctx, ""); !errors.Is(err, engine.ErrInvalidKey) {
		t.Errorf("Watch of an empty key: %v", err)
	}
}

// TestRevokeEndsLeases revokes the engine's etcd lease behind its back:
// every lease it granted ends with ErrLeaseLost, OnLost running before
// Done closes, and the next Acquire runs on a new etcd lease.
func TestRevokeEndsLeases(t *testing.T) {
	es := engines(t, 1)
	e := es[0]
	key := testKey(t)
	ctx := bounded(t)
	admin := adminClient(t)
	var lostErr error
	doneAtLost := true
	lost := make(chan struct{})
	granted := make(chan engine.Lease, 1)
	req := engine.Request{Key: key, TTL: time.Minute, Renew: true, OnLost: func(err error) {
		l := <-granted
		lostErr = err
		doneAtLost = isDone(l)
		close(lost)
	}}
	l, err := e.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	granted <- l
	resp, err := admin.Get(ctx, testPrefix+key+"\x00", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("the lease's entry: %v %v", resp, err)
	}
	first := resp.Kvs[0].Lease
	if _, err := admin.Revoke(ctx, clientv3.LeaseID(first)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(hang):
		t.Fatal("Done did not close after the etcd lease was revoked")
	}
	<-lost
	if !errors.Is(lostErr, engine.ErrLeaseLost) || !errors.Is(l.Err(), engine.ErrLeaseLost) {
		t.Errorf("OnLost got %v, Err %v; want ErrLeaseLost", lostErr, l.Err())
	}
	if doneAtLost {
		t.Error("Done was closed before OnLost ran")
	}
	if err := l.Release(ctx); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("release after the revoke: want ErrNotHeld, got %v", err)
	}
	next, err := e.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire after the revoke: %v", err)
	}
	resp, err = admin.Get(ctx, testPrefix+key+"\x00", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == first {
		t.Errorf("entry after the revoke: %v %v; want one, on a new etcd lease", resp, err)
	}
	if err := next.Release(ctx); err != nil {
		t.Error(err)
	}
}

func isDone(l engine.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

// queueLen counts key's queue entries on the server.
func queueLen(ctx context.Context, admin *clientv3.Client, key string) (int, error) {
	left, err := leftovers(ctx, admin, key)
	return len(left), err
}

// adminClient is a raw client of the test server.
func adminClient(t *testing.T) *clientv3.Client {
	t.Helper()
	return client(t, clientv3.Config{Endpoints: []string{testenv.EtcdAddr(t)}})
}

// waitFor polls cond until it holds, failing after hang.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWrongPassword: Dial with a wrong password does no I/O, and the first
// call fails as access denied, without the password in its text.
func TestWrongPassword(t *testing.T) {
	cfg := deniedConfig(t)
	cfg.Password = "not-the-secret-7f3a"
	e, err := dial(cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx := bounded(t)
	_, err = e.Acquire(ctx, engine.Request{Key: testKey(t), TTL: time.Minute, Renew: true})
	var op *engine.OpError
	if !errors.As(err, &op) || !errors.Is(err, engine.ErrAccessDenied) || errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Acquire with a wrong password: want an OpError wrapping ErrAccessDenied only, got %v", err)
	}
	if strings.Contains(err.Error(), cfg.Password) {
		t.Errorf("the error shows the password: %v", err)
	}
	if err := e.Ping(ctx); !errors.Is(err, engine.ErrAccessDenied) {
		t.Errorf("Ping with a wrong password: want ErrAccessDenied, got %v", err)
	}
}

// TestWatchSeesAChangeRightAfterIt: a grant made the moment Watch returns
// is reported, however late the watch's own goroutine gets going (the
// watch starts from the revision read before Watch returned).
func TestWatchSeesAChangeRightAfterIt(t *testing.T) {
	es := engines(t, 1)
	// One P, and the grant on the watching engine's own connection: the
	// grant's request is queued before the watch goroutine can run, as
	// on a loaded machine.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for i := range 20 {
		key := testKey(t)
		ctx, cancel := context.WithTimeout(bounded(t), 5*time.Second)
		ch, err := es[0].Watch(ctx, key)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		l, err := es[0].Acquire(ctx, engine.Request{Key: key, TTL: time.Minute, Renew: true})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
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

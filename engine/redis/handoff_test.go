package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestHandOffDelayedDelivery: a release hands the key to the waiting
// writer, whose pub/sub connection delivers the grant 300ms late. The
// waiter's lease must count from no later than the grant on the server,
// so the delay comes off its local validity, and its remaining local
// validity never exceeds the server's PTTL. The waiter's recheck is set
// long (a pause of at least 750ms) so that only the message can deliver
// the grant inside the window the test accepts; the default's pauses,
// drawn from 250ms to 500ms, could find the grant before the message came.
func TestHandOffDelayedDelivery(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	key := uniqueKey(t)
	holder := mustEngine(t, newClient(t, addr))
	const recheck = 1500 * time.Millisecond
	waiting := mustEngine(t, newClient(t, addr), WithRecheck(recheck))
	const delay = 300 * time.Millisecond
	waiting.hub.delay = delay
	keys := holder.keysOf(key)

	first, err := holder.Acquire(ctxT(t), hold(key, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   engine.Lease
		err error
	}
	got := make(chan result, 1)
	req := engine.Request{Key: key, Mode: engine.Exclusive, TTL: 2 * time.Second, Wait: true}
	go func() {
		l, err := waiting.Acquire(ctxT(t), req)
		got <- result{l, err}
	}()
	// The second attempt, sent once the wake channel is subscribed, is
	// the registration the release serves.
	waitFor(t, "the waiter's second registration", func() bool {
		vals := admin.HVals(context.Background(), keys.h).Val()
		return len(vals) == 1 && vals[0][len(vals[0])-2:] == " 2"
	})
	if err := first.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	r := <-got
	received := time.Now()
	if r.err != nil {
		t.Fatal(r.err)
	}
	l := r.l.(*lease)
	defer l.Release(context.Background())
	before := time.Now()
	pttl := time.Duration(admin.PTTL(context.Background(), keys.w).Val()) * time.Millisecond
	waiting.mu.Lock()
	valid := l.valid
	waiting.mu.Unlock()

	if l.Token() <= first.Token() {
		t.Errorf("hand-off token %d is not above the previous holder's %d", l.Token(), first.Token())
	}
	if took := received.Sub(released); took < delay || took >= recheck/2 {
		t.Fatalf("the grant came %v after the release, outside [%v, %v): not the delayed message",
			took, delay, recheck/2)
	}
	if at := valid.Add(-l.life()); at.After(released) { // granted set valid to at + life
		t.Errorf("the lease counts from %v after the release returned, later than the grant on the server",
			at.Sub(released))
	}
	if left, most := valid.Sub(received), l.life()-delay; left > most {
		t.Errorf("local validity left at delivery %v exceeds the lease's life less the delay, %v", left, most)
	}
	if local := valid.Sub(before); local > pttl {
		t.Errorf("local validity left %v exceeds the server's PTTL %v", local, pttl)
	}
}

// TestHandOffAt: a hand-off counts from the send time of the attempt
// whose registration it served, or from the first attempt when that one
// is unknown or too old to be kept (an earlier time, so a shorter lease).
func TestHandOffAt(t *testing.T) {
	l := &attempt{}
	base := time.Unix(1000, 0)
	for i := range 20 {
		l.n++
		sent := base.Add(time.Duration(i) * time.Second)
		if l.n == 1 {
			l.first = sent
		}
		l.sents[l.n%int64(len(l.sents))] = sent
	}
	for _, c := range []struct {
		a, d int64
		want time.Time
	}{
		{20, 1500, base.Add(19*time.Second + 1500*time.Microsecond)},
		{13, 0, base.Add(12 * time.Second)},
		{12, 7, base.Add(7 * time.Microsecond)}, // evicted: the first attempt
		{0, 7, base.Add(7 * time.Microsecond)},  // unknown
		{21, 7, base.Add(7 * time.Microsecond)}, // not sent yet
		{20, -5, base.Add(19 * time.Second)},    // a clock step back counts as 0
	} {
		if got := l.handOffAt(c.a, c.d); !got.Equal(c.want) {
			t.Errorf("handOffAt(%d, %d) = %v, want %v", c.a, c.d, got.Sub(base), c.want.Sub(base))
		}
	}
}

// TestNoPublishWithoutWaiters: an uncontended release publishes nothing;
// with a reader waiting it wakes it.
func TestNoPublishWithoutWaiters(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := fmt.Sprintf("cerberus-nopub-%d:", time.Now().UnixNano())
	e := mustEngine(t, newClient(t, addr), WithPrefix(prefix))
	ps := newClient(t, addr).PSubscribe(ctxT(t), prefix+"*")
	defer ps.Close()
	if _, err := ps.Receive(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	msgs := ps.Channel()
	key := uniqueKey(t)
	for _, mode := range []engine.Mode{engine.Exclusive, engine.Shared} {
		for range 5 {
			l, err := e.Acquire(ctxT(t), engine.Request{Key: key, Mode: mode, TTL: time.Second, Renew: true, Wait: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case m := <-msgs:
		t.Fatalf("an uncontended release published %q on %q", m.Payload, m.Channel)
	case <-time.After(200 * time.Millisecond):
	}

	// A waiting reader is woken: the subscription would see a publish.
	w, err := e.Acquire(ctxT(t), hold(key, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	reader := mustEngine(t, newClient(t, addr), WithPrefix(prefix))
	done := make(chan error, 1)
	go func() {
		r, err := reader.Acquire(ctxT(t), engine.Request{Key: key, Mode: engine.Shared, TTL: time.Second, Renew: true, Wait: true})
		if err == nil {
			err = r.Release(context.Background())
		}
		done <- err
	}()
	waitFor(t, "the reader to register", func() bool {
		return newZCard(t, addr, e.keysOf(key).rw) == 1
	})
	if err := w.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		if m.Payload != "*" {
			t.Errorf("the release published %q, want *", m.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a release with a reader waiting published nothing")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func newZCard(t *testing.T, addr, key string) int64 {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	return c.ZCard(context.Background(), key).Val()
}

// TestHandOffFoundByAttempt: the grant message comes too late (held back
// 1s), so the waiter's next attempt, on its 30ms recheck, finds its own id
// in :w and takes the grant from :h. The lease still counts from no later
// than the grant on the server.
func TestHandOffFoundByAttempt(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	key := uniqueKey(t)
	holder := mustEngine(t, newClient(t, addr))
	waiting := mustEngine(t, newClient(t, addr), WithRecheck(30*time.Millisecond))
	waiting.hub.delay = time.Second
	keys := holder.keysOf(key)

	first, err := holder.Acquire(ctxT(t), hold(key, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var l *lease
	go func() {
		g, err := waiting.Acquire(ctxT(t), engine.Request{Key: key, Mode: engine.Exclusive, TTL: 2 * time.Second, Wait: true})
		if err == nil {
			l = g.(*lease)
		}
		got <- err
	}()
	waitFor(t, "the waiter to register", func() bool {
		return admin.HLen(context.Background(), keys.h).Val() == 1
	})
	if err := first.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if took := time.Since(released); took >= time.Second {
		t.Fatalf("the waiter took %v, not its recheck: it waited for the held-back message", took)
	}
	if l.Token() <= first.Token() {
		t.Errorf("hand-off token %d is not above the previous holder's %d", l.Token(), first.Token())
	}
	before := time.Now()
	pttl := time.Duration(admin.PTTL(context.Background(), keys.w).Val()) * time.Millisecond
	waiting.mu.Lock()
	valid := l.valid
	waiting.mu.Unlock()
	if at := valid.Add(-l.life()); at.After(released) { // granted set valid to at + life
		t.Errorf("the lease counts from %v after the release returned", at.Sub(released))
	}
	if local := valid.Sub(before); local > pttl {
		t.Errorf("local validity left %v exceeds the server's PTTL %v", local, pttl)
	}
	if g := admin.HGet(context.Background(), keys.h, l.id).Val(); g != "" {
		t.Errorf("the grant record %q is still in :h after the waiter took it", g)
	}
}

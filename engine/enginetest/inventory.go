package enginetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// RunList checks the engine.Lister of engines from newEngine (found with
// engine.ListerOf): bad arguments are refused, a held key is listed with
// its holders' mode, token and value, a released key disappears, the
// prefix filters, the limit bounds the listing and sets More, and a
// counted Waiters sees a waiting Acquire. It fails when the engine has no
// Lister.
func RunList(t *testing.T, newEngine Factory) {
	t.Helper()
	e, err := newEngine()
	if err != nil {
		t.Fatalf("new engine: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ls := engine.ListerOf(e)
	if ls == nil {
		t.Fatalf("%s has no engine.Lister", e.Name())
	}
	ctx := context.Background()
	for _, bad := range []struct {
		prefix string
		limit  int
	}{{"", 0}, {"x", -1}, {"x", engine.MaxListLimit + 1}} {
		if _, err := ls.List(ctx, bad.prefix, bad.limit); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("List(%q, %d) = %v; want engine.ErrInvalidRequest", bad.prefix, bad.limit, err)
		}
	}
	base := "inv-" + runID()
	hold := func(key string, mode engine.Mode, value string) engine.Lease {
		t.Helper()
		l, err := e.Acquire(ctx, engine.Request{Key: key, Mode: mode, Renew: true, Value: value,
			TTL: max(10*time.Second, e.Limits().MinTTL)})
		if err != nil {
			t.Fatalf("acquire %s: %v", key, err)
		}
		t.Cleanup(func() { _ = l.Release(context.Background()) })
		return l
	}
	la := hold(base+"/a", engine.Exclusive, "va")
	var b string
	if e.Limits().ExclusiveOnly {
		// No shared leases: key b has one exclusive holder instead.
		r1 := hold(base+"/b", engine.Exclusive, "r1")
		b = fmt.Sprintf("%s/b[X %d r1]", base, r1.Token())
	} else {
		r1 := hold(base+"/b", engine.Shared, "r1")
		r2 := hold(base+"/b", engine.Shared, "r2")
		b = fmt.Sprintf("%s/b[S %d r1, S %d r2]", base, r1.Token(), r2.Token())
	}
	hold(base+"-other/c", engine.Exclusive, "outside")
	mustList(t, ls, base+"/", 0, fmt.Sprintf("%s/a[X %d va] %s", base, la.Token(), b), false)
	mustList(t, ls, base+"/", 1, fmt.Sprintf("%s/a[X %d va]", base, la.Token()), true)
	mustList(t, ls, base+"/b", 0, b, false)
	checkWaiters(t, newEngine, ls, base+"/a")
	if err := la.Release(ctx); err != nil {
		t.Fatalf("release %s/a: %v", base, err)
	}
	mustList(t, ls, base+"/", 0, b, false)
}

// mustList lists prefix with limit and compares the keys and holders, in
// the short form of describe, and More with want and wantMore.
func mustList(t *testing.T, ls engine.Lister, prefix string, limit int, want string, wantMore bool) {
	t.Helper()
	inv, err := ls.List(context.Background(), prefix, limit)
	if err != nil {
		t.Fatalf("List(%q, %d): %v", prefix, limit, err)
	}
	if got := describe(t, inv.Keys); got != want || inv.More != wantMore {
		t.Errorf("List(%q, %d) = %s (More %v); want %s (More %v)", prefix, limit, got, inv.More, want, wantMore)
	}
}

// describe renders keys as "key[X token value, S token value] ...", and
// checks that any Granted or Expires time an engine reports is plausible.
func describe(t *testing.T, keys []engine.HeldKey) string {
	t.Helper()
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += " "
		}
		out += k.Key + "["
		for j, h := range k.Holders {
			if j > 0 {
				out += ", "
			}
			m := "X"
			if h.Mode == engine.Shared {
				m = "S"
			}
			out += fmt.Sprintf("%s %d %s", m, h.Token, h.Value)
			if d := time.Since(h.Granted); !h.Granted.IsZero() && (d < -time.Minute || d > 10*time.Minute) {
				t.Errorf("%s: holder %d granted at %v, %v ago", k.Key, h.Token, h.Granted, d)
			}
			if d := time.Until(h.Expires); !h.Expires.IsZero() && (d <= 0 || d > time.Hour) {
				t.Errorf("%s: holder %d expires at %v, in %v", k.Key, h.Token, h.Expires, d)
			}
		}
		out += "]"
	}
	return out
}

// checkWaiters starts an Acquire waiting for the held key from a second
// engine and lists key until its Waiters is 1, unless the engine reports
// -1 (cannot count). Before that wait, a counted Waiters must be 0.
func checkWaiters(t *testing.T, newEngine Factory, ls engine.Lister, key string) {
	t.Helper()
	n, err := waitersOf(ls, key)
	if err != nil || n > 0 || n < -1 {
		t.Fatalf("waiters of %s before any wait: %d, %v; want 0 or -1", key, n, err)
	}
	if n == -1 {
		return
	}
	e2, err := newEngine()
	if err != nil {
		t.Fatalf("new engine: %v", err)
	}
	defer e2.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e2.Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, Renew: true, Wait: true,
			TTL: max(10*time.Second, e2.Limits().MinTTL)})
	}()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n, err = waitersOf(ls, key); err != nil || n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || n != 1 {
		t.Errorf("waiters of %s while one Acquire waits: %d, %v; want 1", key, n, err)
	}
}

// waitersOf lists exactly key and returns its Waiters.
func waitersOf(ls engine.Lister, key string) (int, error) {
	inv, err := ls.List(context.Background(), key, 0)
	if err != nil {
		return 0, err
	}
	for _, k := range inv.Keys {
		if k.Key == key {
			return k.Waiters, nil
		}
	}
	return 0, fmt.Errorf("%s is not listed", key)
}

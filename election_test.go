package cerberus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
)

// next receives from ch, failing after a bound.
func next(t *testing.T, ch <-chan cerberus.Leader, what string) cerberus.Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatalf("%s: Observe's channel closed", what)
		}
		return l
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing observed within 5s", what)
	}
	return cerberus.Leader{}
}

// TestElectionHandOver: two candidates in two clients; the first leads,
// Leader and Observe show it; on its resignation the second leads at once
// with a larger token, and Observe shows that too, in order.
func TestElectionHandOver(t *testing.T) {
	store := memory.NewStore()
	newClient := func() *cerberus.Client {
		c, err := cerberus.New(memory.New(memory.WithStore(store)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b, watcher := newClient(), newClient(), newClient()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	el := watcher.Election("scheduler")
	if _, err := el.Leader(ctx); !errors.Is(err, cerberus.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	obs := el.Observe(ctx)
	la, err := a.Election("scheduler").Campaign(ctx, "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := next(t, obs, "first leader"); got.Value != "pod-a" || got.Token != la.Token() {
		t.Fatalf("observed %+v, want pod-a with token %d", got, la.Token())
	}
	if _, err := b.Election("scheduler").TryCampaign(ctx, "pod-b"); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatalf("TryCampaign while pod-a leads: %v, want ErrNotAcquired", err)
	}
	won := make(chan *cerberus.Lease, 1)
	go func() {
		l, err := b.Election("scheduler").Campaign(ctx, "pod-b")
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	time.Sleep(20 * time.Millisecond)
	if l, err := el.Leader(ctx); err != nil || l.Value != "pod-a" {
		t.Fatalf("Leader while pod-b campaigns: %+v, %v; want pod-a", l, err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var lb *cerberus.Lease
	select {
	case lb = <-won:
	case <-time.After(5 * time.Second):
		t.Fatal("pod-b was not elected after pod-a resigned")
	}
	if lb == nil {
		return
	}
	if lb.Token() <= la.Token() {
		t.Errorf("pod-b's token %d is not above pod-a's %d", lb.Token(), la.Token())
	}
	if got := next(t, obs, "second leader"); got.Value != "pod-b" || got.Token != lb.Token() {
		t.Fatalf("observed %+v, want pod-b with token %d", got, lb.Token())
	}
	_ = lb.Unlock(ctx)
	cancel()
	for range obs {
	}
}

// TestElectionExpiry: a leader whose lease expires sees Done close with
// ErrLeaseLost, and only then can another be elected.
func TestElectionExpiry(t *testing.T) {
	c, err := cerberus.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	el := c.Election("cron")
	l, err := el.Campaign(ctx, "one", cerberus.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l2, err := el.Campaign(wctx, "two")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("a second leader was elected while the first's Done was still open")
	}
	if !errors.Is(l.Err(), cerberus.ErrLeaseLost) {
		t.Errorf("expired leadership ended with %v, want ErrLeaseLost", l.Err())
	}
	if got, err := el.Leader(ctx); err != nil || got.Value != "two" || got.Token != l2.Token() {
		t.Errorf("Leader = %+v, %v; want two with token %d", got, err, l2.Token())
	}
	_ = l2.Unlock(ctx)
}

// TestElectionBadInput: an empty name, a value that is too long or has a
// control character, are refused before any I/O; an engine that cannot
// list holders makes Leader fail and Observe close.
func TestElectionBadInput(t *testing.T) {
	c, err := cerberus.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Election("").Campaign(ctx, "v"); !errors.Is(err, cerberus.ErrInvalidKey) {
		t.Errorf("Campaign with an empty name: %v, want ErrInvalidKey", err)
	}
	if _, err := c.Election("").Leader(ctx); !errors.Is(err, cerberus.ErrInvalidKey) {
		t.Errorf("Leader with an empty name: %v, want ErrInvalidKey", err)
	}
	for _, v := range []string{strings.Repeat("x", 257), "a\nb", "\xff"} {
		if _, err := c.Election("e").Campaign(ctx, v); !errors.Is(err, cerberus.ErrInvalidRequest) {
			t.Errorf("Campaign with value %q: %v, want ErrInvalidRequest", v, err)
		}
	}
	if _, err := c.Election("e").Leader(ctx); !errors.Is(err, cerberus.ErrNoLeader) {
		t.Errorf("Leader after refused campaigns: %v, want ErrNoLeader", err)
	}
	plain, err := cerberus.New(uncounted{memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Election("e").Leader(ctx); !errors.Is(err, cerberus.ErrInvalidRequest) {
		t.Errorf("Leader on an engine that cannot list holders: %v, want ErrInvalidRequest", err)
	}
	if _, ok := <-plain.Election("e").Observe(ctx); ok {
		t.Error("Observe on an engine that cannot list holders delivered a leader")
	}
	// An Inspector that does not serve Holders as configured (a SQL
	// session engine without holder records): Leader says so, Observe
	// closes instead of polling it for ever.
	unserved, err := cerberus.New(noHolders{memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer unserved.Close()
	if _, err := unserved.Election("e").Leader(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Leader on an engine whose Holders is unsupported: %v, want errors.ErrUnsupported", err)
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, ok := <-unserved.Election("e").Observe(octx); ok || octx.Err() != nil {
		t.Errorf("Observe on an engine whose Holders is unsupported: delivered %v, or stayed open until its ctx "+
			"ended (%v)", ok, octx.Err())
	}
}

// noHolders is an engine.Inspector whose Holders is unsupported.
type noHolders struct{ engine.Engine }

func (noHolders) Holders(context.Context, string) ([]engine.Holder, error) {
	return nil, fmt.Errorf("test: no holder records: %w", errors.ErrUnsupported)
}

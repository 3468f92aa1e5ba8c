package failover_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/failover"
)

// The root package's Client, Semaphore, Election and Observer over a
// Manager: what a switch does to each.

type recordObserver struct {
	mu       sync.Mutex
	acquired []cerberus.AcquireEvent
	lost     []cerberus.LostEvent
}

func (r *recordObserver) Acquired(e cerberus.AcquireEvent) {
	r.mu.Lock()
	r.acquired = append(r.acquired, e)
	r.mu.Unlock()
}

func (r *recordObserver) Lost(e cerberus.LostEvent) {
	r.mu.Lock()
	r.lost = append(r.lost, e)
	r.mu.Unlock()
}

func (r *recordObserver) snapshot() ([]cerberus.AcquireEvent, []cerberus.LostEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cerberus.AcquireEvent(nil), r.acquired...), append([]cerberus.LostEvent(nil), r.lost...)
}

// TestObserverSeesGrantsRefusalsAndLosses: an Observer names the engine
// that granted or refused, and a switch reports the lease lost there.
func TestObserverSeesGrantsRefusalsAndLosses(t *testing.T) {
	fl := newFleet(t)
	rec := &recordObserver{}
	f, err := failover.New([]failover.NamedEngine{{Name: "a", Engine: fl.a}, {Name: "b", Engine: fl.b}}, failover.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(f, cerberus.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := cerberus.WithOwner(ctxT(t))
	l := must(t)(c.Lock(ctx, "k"))
	_ = must(t)(c.Lock(ctx, "k")) // re-entry: not reported
	if _, err := c.TryLock(ctxT(t), "k"); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatal(err)
	}
	if err := f.SetActive("b"); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	onB := must(t)(c.RLock(ctxT(t), "r"))
	_ = onB.Unlock(ctxT(t))
	acq, lost := rec.snapshot()
	if len(acq) != 3 {
		t.Fatalf("%d acquire events, want 3 (grant, refusal, shared grant): %+v", len(acq), acq)
	}
	if acq[0].Engine != "a" || acq[0].Err != nil || acq[0].Token != l.Token() || !acq[0].Wait || acq[0].Shared {
		t.Errorf("grant event %+v", acq[0])
	}
	if acq[1].Engine != "a" || !errors.Is(acq[1].Err, cerberus.ErrNotAcquired) || acq[1].Wait {
		t.Errorf("refusal event %+v", acq[1])
	}
	if acq[2].Engine != "b" || !acq[2].Shared || acq[2].Err != nil {
		t.Errorf("grant on b event %+v", acq[2])
	}
	if len(lost) != 1 || lost[0].Engine != "a" || lost[0].Key != "k" || !errors.Is(lost[0].Err, cerberus.ErrEngineSwitched) {
		t.Fatalf("lost events %+v, want one for k on a with ErrEngineSwitched", lost)
	}
}

// TestElectionAcrossSwitch: a switch ends the leadership with
// ErrEngineSwitched; a campaigner that was waiting leads on the new
// engine, and Observe (on the Manager) sees it with the new epoch's
// token.
func TestElectionAcrossSwitch(t *testing.T) {
	fl := newFleet(t)
	c, f := fl.client(t, failover.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	el := c.Election("leader")
	obs := el.Observe(ctx)
	first, err := el.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	if got := next(t, obs, "first leader"); got.Value != "first" || got.Token != first.Token() {
		t.Fatalf("observed %+v, want first with token %d", got, first.Token())
	}
	won := make(chan *cerberus.Lease, 1)
	go func() {
		l, err := el.Campaign(ctx, "second")
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	time.Sleep(20 * time.Millisecond)
	if err := f.SetActive("b"); err != nil {
		t.Fatal(err)
	}
	<-first.Done()
	if !errors.Is(first.Err(), cerberus.ErrEngineSwitched) {
		t.Errorf("leadership ended with %v, want ErrEngineSwitched", first.Err())
	}
	var second *cerberus.Lease
	select {
	case second = <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting campaigner did not lead on the new engine")
	}
	if second == nil {
		return
	}
	if second.Token() <= first.Token() {
		t.Errorf("token after the switch %d is not above %d", second.Token(), first.Token())
	}
	if got := next(t, obs, "leader after the switch"); got.Value != "second" || got.Token != second.Token() {
		t.Fatalf("observed %+v, want second with token %d", got, second.Token())
	}
	_ = second.Unlock(ctx)
}

// TestSemaphoreAcrossSwitch: a switch ends every permit with
// ErrEngineSwitched, a waiter moves to the new engine, and tokens carry
// the new epoch.
func TestSemaphoreAcrossSwitch(t *testing.T) {
	fl := newFleet(t)
	c, f := fl.client(t, failover.Options{})
	ctx := context.Background()
	sem := c.Semaphore("jobs", 1)
	held, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan *cerberus.Lease, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := sem.Acquire(wctx)
		if err != nil {
			t.Error(err)
		}
		waited <- l
	}()
	eventually(t, "the waiter to queue", func() bool { return f.Active() == "a" })
	time.Sleep(20 * time.Millisecond)
	if err := f.SetActive("b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the permit did not end with the switch")
	}
	if !errors.Is(held.Err(), cerberus.ErrEngineSwitched) {
		t.Errorf("permit ended with %v, want ErrEngineSwitched", held.Err())
	}
	var l *cerberus.Lease
	select {
	case l = <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get a permit on the new engine")
	}
	if l == nil {
		return
	}
	if l.Token() <= held.Token() {
		t.Errorf("permit token after the switch %d is not above %d", l.Token(), held.Token())
	}
	if n, err := fl.outB.Semaphore("jobs", 1).InUse(ctx); err != nil || n != 1 {
		t.Errorf("the new engine holds %d permits (%v), want 1", n, err)
	}
	_ = l.Unlock(ctx)
}

package cerberus_test

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
)

func TestLogObserver(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, _, _ := newClients(t, cerberus.WithObserver(cerberus.LogObserver(log)))
	l := must(t)(c.Lock(ctxT(t), "k", cerberus.WithTTL(30*time.Millisecond)))
	<-l.Done()
	out := buf.String()
	for _, want := range []string{"level=DEBUG msg=\"cerberus: lock granted\" engine=memory key=k", "level=WARN msg=\"cerberus: lease lost\" engine=memory key=k"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// endLog is an EndObserver that keeps what it hears, in order.
type endLog struct {
	mu     sync.Mutex
	events []string
	ends   []cerberus.EndEvent
	watch  *cerberus.Lease // Ended notes whether its Done is closed already
	early  bool            // watch's Done was open when its end was reported
}

func (o *endLog) add(s string) { o.mu.Lock(); o.events = append(o.events, s); o.mu.Unlock() }

func (o *endLog) Acquired(e cerberus.AcquireEvent) { o.add("acquired " + e.Key) }
func (o *endLog) Lost(e cerberus.LostEvent)        { o.add("lost " + e.Key) }
func (o *endLog) Ended(e cerberus.EndEvent) {
	o.add("ended " + e.Key)
	o.mu.Lock()
	o.ends = append(o.ends, e)
	if o.watch != nil && o.watch.Key() == e.Key {
		select {
		case <-o.watch.Done():
		default:
			o.early = true
		}
	}
	o.mu.Unlock()
}

func (o *endLog) snapshot() ([]string, []cerberus.EndEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.events), slices.Clone(o.ends)
}

// TestEndObserver: an EndObserver hears each granted lease end once, with
// why it ended and how long it was held: after Lost for a loss, before
// Done closes; a refusal and a nested lease's inner Unlock end nothing.
func TestEndObserver(t *testing.T) {
	o := &endLog{}
	c, other, _ := newClients(t, cerberus.WithObserver(o))
	ctx := ctxT(t)
	owned := cerberus.WithOwner(ctx)
	outer := must(t)(c.Lock(owned, "a"))
	inner := must(t)(c.Lock(owned, "a"))
	must(t)(other.Lock(ctx, "b")) // other shares the observer; c's TryLock is refused
	if _, err := c.TryLock(ctx, "b"); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatalf("TryLock of a held key: %v", err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a held time to see
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ttl := must(t)(c.Lock(ctx, "t", cerberus.WithTTL(500*time.Millisecond)))
	o.mu.Lock()
	o.watch = ttl
	o.mu.Unlock()
	<-ttl.Done()
	o.mu.Lock()
	if !o.early {
		t.Error("the end of t was reported after its Done closed")
	}
	o.mu.Unlock()
	events, ends := o.snapshot() // Done closed: the end is already reported
	want := []string{"acquired a", "acquired b", "acquired b", "ended a", "acquired t", "lost t", "ended t"}
	if !slices.Equal(events, want) {
		t.Fatalf("events %q; want %q", events, want)
	}
	if !errors.Is(ends[0].Err, cerberus.ErrReleased) || ends[0].Held < 10*time.Millisecond ||
		ends[0].Engine != "memory" {
		t.Errorf("end of a: %+v; want ErrReleased on memory, held at least 10ms", ends[0])
	}
	if !errors.Is(ends[1].Err, cerberus.ErrLeaseLost) {
		t.Errorf("end of t: %v; want ErrLeaseLost", ends[1].Err)
	}
	if err := ttl.Unlock(ctx); !errors.Is(err, cerberus.ErrNotHeld) {
		t.Fatal(err)
	}
	if events, _ := o.snapshot(); len(events) != len(want) {
		t.Errorf("Unlock of a lost lease reported %q", events[len(want):])
	}
}

package cerberus_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/memory"
)

func Example() {
	ctx := context.Background()
	c, err := cerberus.New(memory.New())
	if err != nil {
		panic(err)
	}
	defer c.Close()

	l, err := c.Lock(ctx, "order:42")
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", l.Key(), "with a token:", l.Token() > 0)

	// Anyone else is refused while it is held.
	_, err = c.TryLock(ctx, "order:42")
	fmt.Println("second TryLock:", errors.Is(err, cerberus.ErrNotAcquired))

	_ = l.Unlock(context.WithoutCancel(ctx))
	<-l.Done()
	fmt.Println("after Unlock:", l.Err())
	// Output:
	// holding order:42 with a token: true
	// second TryLock: true
	// after Unlock: cerberus: lease released
}

func ExampleClient_Lock() {
	c, _ := cerberus.New(memory.New())
	defer c.Close()

	held, _ := c.Lock(context.Background(), "report")
	defer held.Unlock(context.Background())

	// Lock waits; the context's deadline bounds the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Lock(ctx, "report")
	fmt.Println(errors.Is(err, cerberus.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}

func ExampleClient_RLock() {
	ctx := context.Background()
	c, _ := cerberus.New(memory.New())
	defer c.Close()

	r1, _ := c.RLock(ctx, "catalog")
	r2, err := c.TryRLock(ctx, "catalog")
	fmt.Println("second reader:", err)
	_, err = c.TryLock(ctx, "catalog")
	fmt.Println("writer while read:", errors.Is(err, cerberus.ErrNotAcquired))
	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)
	w, err := c.TryLock(ctx, "catalog")
	fmt.Println("writer after readers:", err, w.Token() > r2.Token())
	// Output:
	// second reader: <nil>
	// writer while read: true
	// writer after readers: <nil> true
}

func ExampleWithOwner() {
	c, _ := cerberus.New(memory.New())
	defer c.Close()
	ctx := cerberus.WithOwner(context.Background())

	outer, _ := c.Lock(ctx, "account:7")
	inner, err := c.Lock(ctx, "account:7") // re-enters: no wait, no round trip
	fmt.Println(err, inner.Token() == outer.Token())
	_ = inner.Unlock(ctx)
	_ = outer.Unlock(ctx) // the key is released here
	fmt.Println(outer.Err())
	// Output:
	// <nil> true
	// cerberus: lease released
}

func ExampleClient_LockAll() {
	ctx := context.Background()
	c, _ := cerberus.New(memory.New())
	defer c.Close()

	m, _ := c.LockAll(ctx, []string{"to:b", "from:a"})
	for _, p := range m.Parts() {
		fmt.Println(p.Key())
	}
	_ = m.Unlock(ctx)
	// Output:
	// from:a
	// to:b
}

func ExampleWithTTL() {
	c, _ := cerberus.New(memory.New())
	defer c.Close()

	l, _ := c.Lock(context.Background(), "job", cerberus.WithTTL(20*time.Millisecond))
	<-l.Done() // not renewed: it expires
	fmt.Println(l.Err())
	// Output: cerberus: lease lost
}

func ExampleWithHoldLimit() {
	c, _ := cerberus.New(memory.New())
	defer c.Close()

	// Renewed by its watchdog, yet held at most 50ms: a hung holder's key
	// frees itself.
	l, _ := c.Lock(context.Background(), "job", cerberus.WithHoldLimit(50*time.Millisecond))
	<-l.Done() // told before the key is released
	fmt.Println(errors.Is(l.Err(), cerberus.ErrHoldLimit), errors.Is(l.Err(), cerberus.ErrLeaseLost))
	// Output: true true
}

func ExampleClient_Semaphore() {
	ctx := context.Background()
	c, _ := cerberus.New(memory.New())
	defer c.Close()

	// At most two report workers at once, across every process.
	sem := c.Semaphore("report-workers", 2)
	a, _ := sem.Acquire(ctx)
	b, _ := sem.Acquire(ctx)
	n, _ := sem.InUse(ctx)
	fmt.Println("permits held:", n)

	_, err := sem.TryAcquire(ctx)
	fmt.Println("a third:", errors.Is(err, cerberus.ErrNotAcquired))

	_ = a.Unlock(ctx)
	c3, err := sem.TryAcquire(ctx)
	fmt.Println("after one came back:", err == nil, c3.Token() > b.Token())
	_ = b.Unlock(ctx)
	_ = c3.Unlock(ctx)
	// Output:
	// permits held: 2
	// a third: true
	// after one came back: true true
}

func ExampleElection() {
	ctx := context.Background()
	c, _ := cerberus.New(memory.New())
	defer c.Close()

	el := c.Election("scheduler")
	lead, _ := el.Campaign(ctx, "pod-7")
	who, _ := el.Leader(ctx)
	fmt.Println("leader:", who.Value, who.Token == lead.Token())

	// Another replica waits; resigning hands over at once.
	next := make(chan *cerberus.Lease)
	go func() {
		l, _ := el.Campaign(ctx, "pod-9")
		next <- l
	}()
	_ = lead.Unlock(ctx)
	l := <-next
	who, _ = el.Leader(ctx)
	fmt.Println("leader:", who.Value, l.Token() > lead.Token())
	_ = l.Unlock(ctx)
	_, err := el.Leader(ctx)
	fmt.Println(errors.Is(err, cerberus.ErrNoLeader))
	// Output:
	// leader: pod-7 true
	// leader: pod-9 true
	// true
}

func ExampleElection_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := cerberus.New(memory.New())
	defer c.Close()

	el := c.Election("scheduler")
	changes := el.Observe(ctx)
	lead, _ := el.Campaign(ctx, "pod-7")
	fmt.Println("observed:", (<-changes).Value)
	_ = lead.Unlock(ctx)
	lead, _ = el.Campaign(ctx, "pod-8")
	fmt.Println("observed:", (<-changes).Value)
	_ = lead.Unlock(ctx)
	// Output:
	// observed: pod-7
	// observed: pod-8
}

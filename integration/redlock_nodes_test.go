package integration

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/engine/redis"
	"github.com/cerberus-go/cerberus/failover"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestLeaseNodes: Lease.Nodes reports a Redlock lease's nodes, directly and
// through a failover.Manager, and says ok=false for an engine without nodes.
func TestLeaseNodes(t *testing.T) {
	addrs := testenv.RedlockAddrs(t)
	clients := make([]redis.Client, len(addrs))
	for i, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	newRedlock := func() engine.Engine {
		rl, err := redis.NewRedlock(clients, redis.WithNodeOptions(redis.WithPrefix(fmt.Sprintf("nodes-%d:", time.Now().UnixNano()))))
		if err != nil {
			t.Fatal(err)
		}
		return rl
	}
	f, err := failover.New([]failover.NamedEngine{{Name: "redlock", Engine: newRedlock()}, {Name: "memory", Engine: memory.New()}}, failover.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const watchdog = 900 * time.Millisecond
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		e    engine.Engine
	}{{"redlock", newRedlock()}, {"failover over redlock", f}} {
		c, err := cerberus.New(tc.e, cerberus.WithWatchdog(watchdog))
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.TryLock(ctx, unique(t, "nodes"))
		if err != nil {
			t.Fatal(err)
		}
		// A node that answered late at the grant is taken at once after it.
		held, total, ok := l.Nodes()
		for start := time.Now(); ok && held < total && time.Since(start) < watchdog; held, total, ok = l.Nodes() {
			time.Sleep(10 * time.Millisecond)
		}
		if held != len(addrs) || total != len(addrs) || !ok {
			t.Fatalf("%s: Nodes() = %d, %d, %v; want %d, %d, true", tc.name, held, total, ok, len(addrs), len(addrs))
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if held, _, _ := l.Nodes(); held != 0 {
			t.Fatalf("%s: Nodes() after Unlock: %d held, want 0", tc.name, held)
		}
		_ = c.Close()
	}
	c, err := cerberus.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx, unique(t, "nodes"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if held, total, ok := l.Nodes(); ok {
		t.Fatalf("memory engine: Nodes() = %d, %d, true; want ok=false", held, total)
	}
}

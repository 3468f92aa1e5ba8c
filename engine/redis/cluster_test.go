package redis

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

func newClusterClient(t *testing.T, addrs []string) *goredis.ClusterClient {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestClusterConformance runs the suite on a three-master Redis Cluster:
// every script touches keys of one slot only.
func TestClusterConformance(t *testing.T) {
	addrs := testenv.RedisClusterAddrs(t)
	admin := newClusterClient(t, addrs)
	probe := mustEngine(t, admin)
	enginetest.Run(t, func() (engine.Engine, error) {
		return New(newClusterClient(t, addrs))
	}, withLeftovers(faultHooks(addrs[0], func(addr string, denied bool) Client {
		o := &goredis.ClusterOptions{Addrs: []string{addr}}
		if denied {
			s := strangerOptions(goredis.Options{})
			o.Username, o.Password = s.Username, s.Password
		}
		c := goredis.NewClusterClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}), leftovers(admin, probe)))
}

// TestClusterBraceKeys: keys with braces of their own, which would split a
// naive {key} tag across slots, lock and release on the cluster, shared and
// fair included.
func TestClusterBraceKeys(t *testing.T) {
	addrs := testenv.RedisClusterAddrs(t)
	e := mustEngine(t, newClusterClient(t, addrs), WithFair(true))
	ctx := context.Background()
	for _, key := range []string{"}", "{}", "a}b{c", "{x}:y", "}{", "{", "plain"} {
		for _, mode := range []engine.Mode{engine.Exclusive, engine.Shared} {
			req := hold(t.Name()+"/"+key, 5e9)
			req.Mode = mode
			l, err := e.Acquire(ctxT(t), req)
			if err != nil {
				t.Fatalf("%q (%v): %v", key, mode, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("%q (%v) release: %v", key, mode, err)
			}
		}
	}
}

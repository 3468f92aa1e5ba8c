package redis

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// newClient connects to the test server and closes the client with t.
func newClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// leftovers lists the lock's state keys that still exist.
func leftovers(c goredis.Cmdable, e *Engine) func(ctx context.Context, key string) ([]string, error) {
	return func(ctx context.Context, key string) ([]string, error) {
		var left []string
		for _, k := range e.keysOf(key).stateKeys() {
			n, err := c.Exists(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			if n > 0 {
				left = append(left, k)
			}
		}
		return left, nil
	}
}

func conformance(t *testing.T, opts ...Option) {
	addr := testenv.RedisAddr(t)
	admin := newClient(t, addr)
	probe, err := New(admin, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = probe.Close() })
	enginetest.Run(t, func() (engine.Engine, error) {
		return New(newClient(t, addr), opts...)
	}, enginetest.Options{
		Leftovers: leftovers(admin, probe),
		Unreachable: func() (engine.Engine, error) {
			return New(newClient(t, "127.0.0.1:1"), opts...)
		},
	})
}

func TestConformance(t *testing.T) { conformance(t) }

func TestConformanceFair(t *testing.T) { conformance(t, WithFair()) }

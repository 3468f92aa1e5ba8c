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

// closedAddr is a loopback port where nothing listens: the Unreachable hook
// of the conformance suite.
const closedAddr = "127.0.0.1:1"

// strangerOptions are client options that every test server refuses with
// WRONGPASS: an ACL user that does not exist. go-redis sends AUTH (or HELLO
// with AUTH) with them on every new connection.
func strangerOptions(o goredis.Options) *goredis.Options {
	o.Username, o.Password = "cerberus-stranger", "wrong-password"
	return &o
}

// faultHooks are the suite's Unreachable and AccessDenied hooks for engines
// on clients made by newClient from a server address: one at closedAddr,
// one that the server at addr refuses.
func faultHooks(addr string, newClient func(addr string, denied bool) Client, opts ...Option) enginetest.Options {
	return enginetest.Options{
		Unreachable:  func() (engine.Engine, error) { return New(newClient(closedAddr, false), opts...) },
		AccessDenied: func() (engine.Engine, error) { return New(newClient(addr, true), opts...) },
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
	}, withLeftovers(faultHooks(addr, func(addr string, denied bool) Client {
		o := &goredis.Options{Addr: addr}
		if denied {
			o = strangerOptions(*o)
		}
		c := goredis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, opts...), leftovers(admin, probe)))
}

// withLeftovers returns o with its Leftovers set to f.
func withLeftovers(o enginetest.Options, f func(ctx context.Context, key string) ([]string, error)) enginetest.Options {
	o.Leftovers = f
	return o
}

func TestConformance(t *testing.T) { conformance(t) }

func TestConformanceFair(t *testing.T) { conformance(t, WithFair(true)) }

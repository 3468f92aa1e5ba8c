package consul_test

import (
	"context"
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// testPrefix is the KV folder the tests lock under.
const testPrefix = "cerberus-test/locks"

// newClient returns an API client for the agent at addr.
func newClient(t testing.TB, addr string) *api.Client {
	t.Helper()
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = addr
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatalf("consul client: %v", err)
	}
	return c
}

// leftovers lists what the agent keeps under key's folder, but for the
// key's fencing counter, which outlives the lock by design (so that tokens
// keep increasing).
func leftovers(c *api.Client, e *consul.Engine) func(ctx context.Context, key string) ([]string, error) {
	return func(ctx context.Context, key string) ([]string, error) {
		q := (&api.QueryOptions{}).WithContext(ctx)
		keys, _, err := c.KV().Keys(e.KeyDir(key), "", q)
		return slices.DeleteFunc(keys, func(k string) bool { return k == e.KeyDir(key)+"fence" }), err
	}
}

// conformance runs the suite on the shared agent with opts. Its
// Unreachable hook dials a port where nothing listens; its AccessDenied
// hook dials a private agent with ACLs on (default deny) with a token
// that agent does not know.
func conformance(t *testing.T, opts ...consul.Option) {
	addr := testenv.ConsulAddr(t)
	outside := newClient(t, addr)
	probe, err := consul.New(outside, consul.WithPrefix(testPrefix))
	if err != nil {
		t.Fatal(err)
	}
	// No lock-delay: the engine's floor, and so the suite's short lease
	// period, is then Consul's least, 20s.
	opts = append([]consul.Option{consul.WithPrefix(testPrefix), consul.WithLockDelay(0)}, opts...)
	acl, _ := testenv.StartConsulACL(t, "")
	enginetest.Run(t, func() (engine.Engine, error) {
		return consul.New(newClient(t, addr), opts...)
	}, enginetest.Options{
		Leftovers: leftovers(outside, probe),
		Unreachable: func() (engine.Engine, error) {
			return consul.Dial("127.0.0.1:1", opts...)
		},
		AccessDenied: func() (engine.Engine, error) {
			return consul.Dial(acl.Addr, append(opts, consul.WithToken(testenv.ConsulUUID(t)))...)
		},
	})
}

// The two conformance runs go side by side: their checks mostly wait out
// Consul's 20 s lease floor (about 200 s each), on keys of their own.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance(t)
}

func TestConformanceFair(t *testing.T) {
	t.Parallel()
	conformance(t, consul.WithFair(true))
}

package etcd_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/etcd"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// testTTL is the etcd lease period of the engines under test: short, so
// that the suite's expiry checks run quickly, and above etcd's minimum.
const testTTL = 3 * time.Second

// testPrefix keeps test entries apart from anything else on the server.
const testPrefix = "/cerberus-test/locks/"

func TestConformance(t *testing.T) {
	addr := testenv.EtcdAddr(t)
	admin := client(t, clientv3.Config{Endpoints: []string{addr}})
	denied := deniedConfig(t)
	dead := deadAddr(t)
	enginetest.Run(t, func() (engine.Engine, error) {
		return dial(clientv3.Config{Endpoints: []string{addr}})
	}, enginetest.Options{
		Leftovers: func(ctx context.Context, key string) ([]string, error) {
			return leftovers(ctx, admin, key)
		},
		Unreachable: func() (engine.Engine, error) {
			return dial(clientv3.Config{Endpoints: []string{dead}})
		},
		AccessDenied: func() (engine.Engine, error) { return dial(denied) },
	})
}

// dial makes an engine that owns its client, with the test prefix and TTL.
func dial(cfg clientv3.Config, opts ...etcd.Option) (*etcd.Engine, error) {
	opts = append([]etcd.Option{etcd.WithPrefix(testPrefix), etcd.WithLeaseTTL(testTTL)}, opts...)
	return etcd.Dial(cfg, opts...)
}

// client makes a raw client, closed when the test ends.
func client(t testing.TB, cfg clientv3.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// leftovers lists every etcd key under key's queue range.
func leftovers(ctx context.Context, cli *clientv3.Client, key string) ([]string, error) {
	resp, err := cli.Get(ctx, testPrefix+key+"\x00", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, strconv.Quote(string(kv.Key)))
	}
	return out, nil
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
}

// deniedConfig starts an etcd server of the test's own with authentication
// on, and returns the client config of a user whose role may read and
// write only under another prefix: etcd refuses the engine's puts under
// the test prefix with a permission error.
func deniedConfig(t testing.TB) clientv3.Config {
	t.Helper()
	srv := testenv.StartEtcd(t)
	root := client(t, clientv3.Config{Endpoints: []string{srv.Addr}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := root.RoleAdd(ctx, "root"); return err },
		func() error { _, err := root.UserAdd(ctx, "root", "root-secret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "elsewhere"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "elsewhere", "/elsewhere/",
				clientv3.GetPrefixRangeEnd("/elsewhere/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "locker", "locker-secret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "locker", "elsewhere"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth set-up step %d: %v", i, err)
		}
	}
	return clientv3.Config{Endpoints: []string{srv.Addr}, Username: "locker", Password: "locker-secret"}
}

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/etcd"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// etcdLeaseTTL is the etcd lease period of every client here, cerberus's
// engines and concurrency's sessions alike.
const etcdLeaseTTL = 10 * time.Second

// etcdSetup gives each benchmark its own key prefix and deletes it
// afterwards.
func etcdSetup(b *testing.B) (addr, root string) {
	b.Helper()
	addr = testenv.EtcdAddr(b)
	root = fmt.Sprintf("/cerberus-bench-%d/", time.Now().UnixNano())
	admin := newEtcdClient(b, addr)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.Delete(ctx, root, clientv3.WithPrefix())
	})
	return addr, root
}

// newEtcdClient makes a client, closed when the benchmark ends.
func newEtcdClient(b *testing.B, addr string) *clientv3.Client {
	b.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// etcdLibraries are the two libraries side by side, each client with its
// own connection and its own etcd lease.
func etcdLibraries(addr, root string) []zkLibrary {
	return []zkLibrary{
		{"cerberus", func(b *testing.B) zkLockKey {
			e, err := etcd.New(newEtcdClient(b, addr), etcd.WithPrefix(root+"cerberus/"),
				etcd.WithLeaseTTL(etcdLeaseTTL))
			if err != nil {
				b.Fatal(err)
			}
			c, err := cerberus.New(e)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close(); _ = e.Close() })
			return func(ctx context.Context, key string) (func() error, error) {
				l, err := c.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Unlock(context.Background()) }, nil
			}
		}},
		{"concurrency.Mutex", func(b *testing.B) zkLockKey {
			s, err := concurrency.NewSession(newEtcdClient(b, addr),
				concurrency.WithTTL(int(etcdLeaseTTL/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return func(ctx context.Context, key string) (func() error, error) {
				m := concurrency.NewMutex(s, root+"mutex/"+key)
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return func() error { return m.Unlock(context.Background()) }, nil
			}
		}},
	}
}

// BenchmarkEtcdUncontended: one client, lock+unlock cycles on one key.
func BenchmarkEtcdUncontended(b *testing.B) {
	once(b, func() {
		addr, root := etcdSetup(b)
		var libs []Cycle
		for _, lib := range etcdLibraries(addr, root) {
			lock := onKey(lib.client(b), "uncontended")
			warm(lock)
			libs = append(libs, Cycle{"etcd/" + lib.name, lock})
		}
		rates := interleavedRates(b, "etcd/", libs)
		Ratio(out, "etcd_uncontended_cycles", "cerberus", "concurrency.Mutex", rates["cerberus"],
			rates["concurrency.Mutex"])
	})
}

// BenchmarkEtcdHotKey: 16 clients on one key, 1 ms critical section.
func BenchmarkEtcdHotKey(b *testing.B) {
	once(b, func() {
		addr, root := etcdSetup(b)
		res := map[string]HotKeyResult{}
		for _, lib := range etcdLibraries(addr, root) {
			r := hotKey("etcd/"+lib.name, func() LockFunc { return onKey(lib.client(b), "hot") }, 30*time.Second)
			r.Report(out)
			res[lib.name] = r
		}
		Ratio(out, "etcd_hotkey_acq", "cerberus", "concurrency.Mutex", res["cerberus"].Rate(),
			res["concurrency.Mutex"].Rate())
		Ratio(out, "etcd_hotkey_wait_p99", "concurrency.Mutex", "cerberus",
			float64(res["concurrency.Mutex"].WaitP99), float64(res["cerberus"].WaitP99))
	})
}

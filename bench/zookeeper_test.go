package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// zkSessionTimeout is the session timeout of every ZooKeeper client here.
const zkSessionTimeout = 10 * time.Second

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// zkSetup gives each benchmark its own root znode and deletes it afterwards.
func zkSetup(b *testing.B) (addr, root string) {
	b.Helper()
	addr = testenv.ZooKeeperAddr(b)
	root = fmt.Sprintf("/cerberus-bench-%d", time.Now().UnixNano())
	admin := newZKConn(b, addr)
	b.Cleanup(func() { zkRemoveTree(admin, root) })
	return addr, root
}

func zkRemoveTree(c *zk.Conn, path string) {
	children, _, err := c.Children(path)
	if err != nil {
		return
	}
	for _, ch := range children {
		zkRemoveTree(c, path+"/"+ch)
	}
	_ = c.Delete(path, -1)
}

// newZKConn connects and waits for the session, so that connection set-up
// is not measured.
func newZKConn(b *testing.B, addr string) *zk.Conn {
	b.Helper()
	c, events, err := zk.Connect([]string{addr}, zkSessionTimeout, zk.WithLogger(zkQuiet{}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	for deadline := time.After(20 * time.Second); ; {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() {
					for range events { // keep draining; go-zookeeper drops events when full anyway
					}
				}()
				return c
			}
		case <-deadline:
			b.Fatalf("no ZooKeeper session with %s within 20s", addr)
		}
	}
}

// zkLockKey locks one key for one client.
type zkLockKey func(ctx context.Context, key string) (unlock func() error, err error)

// zkLibrary makes a client of one library, with its own connection (and so
// its own session).
type zkLibrary struct {
	name   string
	client func(b *testing.B) zkLockKey
}

func zkLibraries(addr, root string) []zkLibrary {
	return []zkLibrary{
		{"cerberus", func(b *testing.B) zkLockKey {
			e, err := zookeeper.Dial([]string{addr}, zookeeper.WithSessionTimeout(zkSessionTimeout),
				zookeeper.WithPrefix(root+"/cerberus"), zookeeper.WithLogger(zkQuiet{}))
			if err != nil {
				b.Fatal(err)
			}
			c, err := cerberus.New(e)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close(); _ = e.Close() })
			if err := e.Ping(context.Background()); err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context, key string) (func() error, error) {
				l, err := c.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Unlock(context.Background()) }, nil
			}
		}},
		{"zk.Lock", func(b *testing.B) zkLockKey {
			conn := newZKConn(b, addr)
			return func(ctx context.Context, key string) (func() error, error) {
				// zk.Lock takes no context: its wait cannot be cancelled.
				l := zk.NewLock(conn, root+"/zk/"+key, zk.WorldACL(zk.PermAll))
				if err := l.Lock(); err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}
		}},
	}
}

// onKey binds a client to one key.
func onKey(lock zkLockKey, key string) LockFunc {
	return func(ctx context.Context) (func() error, error) { return lock(ctx, key) }
}

// BenchmarkZooKeeperUncontended: one client, lock+unlock cycles on one key.
func BenchmarkZooKeeperUncontended(b *testing.B) {
	once(b, func() {
		addr, root := zkSetup(b)
		var libs []Cycle
		for _, lib := range zkLibraries(addr, root) {
			lock := onKey(lib.client(b), "uncontended")
			warm(lock)
			libs = append(libs, Cycle{"zookeeper/" + lib.name, lock})
		}
		rates := interleavedRates(b, "zookeeper/", libs)
		Ratio(out, "zookeeper_uncontended_cycles", "cerberus", "zk.Lock", rates["cerberus"], rates["zk.Lock"])
	})
}

// BenchmarkZooKeeperUncontendedDistinctKeys: one client, lock+unlock
// cycles on a new key each time, and the znodes each library leaves behind
// right after: cerberus's lock nodes are containers the server removes
// later (within znode.container.checkIntervalMs, a minute by default);
// zk.Lock's are persistent.
func BenchmarkZooKeeperUncontendedDistinctKeys(b *testing.B) {
	once(b, func() {
		addr, root := zkSetup(b)
		var libs []Cycle
		for _, lib := range zkLibraries(addr, root) {
			lock := lib.client(b)
			i := 0
			libs = append(libs, Cycle{"zookeeper-distinct/" + lib.name, func(ctx context.Context) (func() error, error) {
				i++
				return lock(ctx, fmt.Sprintf("distinct-%d", i))
			}})
		}
		rates := interleavedRates(b, "zookeeper-distinct/", libs)
		admin := newZKConn(b, addr)
		for dir, name := range map[string]string{"cerberus": "cerberus", "zk": "zk.Lock"} {
			left, _, _ := admin.Children(root + "/" + dir)
			fmt.Fprintf(out, "BENCH uncontended zookeeper-distinct/%s nodes_left=%d\n", name, len(left))
		}
		Ratio(out, "zookeeper_uncontended_distinct_cycles", "cerberus", "zk.Lock", rates["cerberus"], rates["zk.Lock"])
	})
}

// BenchmarkZooKeeperHotKey: 16 clients on one key, 1 ms critical section.
func BenchmarkZooKeeperHotKey(b *testing.B) {
	once(b, func() {
		addr, root := zkSetup(b)
		res := map[string]HotKeyResult{}
		for _, lib := range zkLibraries(addr, root) {
			r := hotKey("zookeeper/"+lib.name, func() LockFunc { return onKey(lib.client(b), "hot") }, 30*time.Second)
			r.Report(out)
			res[lib.name] = r
		}
		Ratio(out, "zookeeper_hotkey_acq", "cerberus", "zk.Lock", res["cerberus"].Rate(), res["zk.Lock"].Rate())
		Ratio(out, "zookeeper_hotkey_wait_p99", "zk.Lock", "cerberus", float64(res["zk.Lock"].WaitP99), float64(res["cerberus"].WaitP99))
	})
}

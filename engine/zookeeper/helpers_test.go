package zookeeper_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
	"github.com/go-zookeeper/zk"
)

// testTimeout is the session timeout of engines on the shared server.
const testTimeout = 10 * time.Second

// quiet discards go-zookeeper's log lines.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// rawConn connects to addr without the engine, for inspecting and meddling,
// and waits for its session.
func rawConn(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect([]string{addr}, testTimeout, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatalf("zk.Connect %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return c
			}
		case <-deadline:
			t.Fatalf("no ZooKeeper session with %s within 20s", addr)
		}
	}
}

// testBase returns a base path unique to the test, removed when it ends.
func testBase(t *testing.T, c *zk.Conn) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	root := "/cerberus-test-" + hex.EncodeToString(b[:])
	t.Cleanup(func() { removeTree(c, root) })
	return root + "/locks"
}

// removeTree deletes path and everything under it, as far as it can.
func removeTree(c *zk.Conn, path string) {
	children, _, err := c.Children(path)
	if err != nil {
		return
	}
	for _, ch := range children {
		removeTree(c, path+"/"+ch)
	}
	_ = c.Delete(path, -1)
}

// leftovers lists the queue nodes still under the key's lock node. The
// lock node itself is a container: the server removes it once it is empty
// (TestNoGarbage and TestCrashedHolderLeavesNothing check that).
func leftovers(c *zk.Conn, base, key string) ([]string, error) {
	parent := base + "/" + zookeeper.EncodeKey(key)
	children, _, err := c.Children(parent)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(children))
	for _, ch := range children {
		out = append(out, parent+"/"+ch)
	}
	return out, nil
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
}

// dial makes an engine on addr, closed when the test ends.
func dial(t *testing.T, addr string, opts ...zookeeper.Option) *zookeeper.Engine {
	t.Helper()
	e, err := zookeeper.Dial([]string{addr}, append([]zookeeper.Option{zookeeper.WithSessionTimeout(testTimeout),
		zookeeper.WithLogger(quiet{})}, opts...)...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// children lists path's children, failing the test on errors.
func children(t *testing.T, c *zk.Conn, path string) []string {
	t.Helper()
	ch, _, err := c.Children(path)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("children of %s: %v", path, err)
	}
	return ch
}

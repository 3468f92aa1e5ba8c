package zookeeper_test

import (
	"context"
	"errors"
	"path"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

func TestConformance(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	dead := deadAddr(t)
	locked := lockedBase(t, admin, base)
	enginetest.Run(t, func() (engine.Engine, error) {
		return zookeeper.Dial([]string{addr}, zookeeper.WithSessionTimeout(testTimeout), zookeeper.WithPrefix(base), zookeeper.WithLogger(quiet{}))
	}, enginetest.Options{
		Leftovers: func(_ context.Context, key string) ([]string, error) {
			return leftovers(admin, base, key)
		},
		// A short session timeout: an unreachable server shows as
		// unavailable when no session comes within it.
		Unreachable: func() (engine.Engine, error) {
			return zookeeper.Dial([]string{dead}, zookeeper.WithSessionTimeout(2*time.Second), zookeeper.WithLogger(quiet{}))
		},
		AccessDenied: func() (engine.Engine, error) {
			return zookeeper.Dial([]string{addr}, zookeeper.WithSessionTimeout(testTimeout), zookeeper.WithPrefix(locked), zookeeper.WithLogger(quiet{}))
		},
	})
}

// lockedBase creates, under base, a node that only a digest user may write
// into (anyone may read it), and returns a base path below it: an engine
// without that user's credentials is refused there with zk.ErrNoAuth.
func lockedBase(t *testing.T, admin *zk.Conn, base string) string {
	t.Helper()
	if _, err := admin.Create(path.Dir(base), nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	locked := path.Dir(base) + "/locked"
	acl := append(zk.DigestACL(zk.PermAll, "owner", "owner-secret"), zk.WorldACL(zk.PermRead)...)
	if _, err := admin.Create(locked, nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	return locked + "/locks"
}

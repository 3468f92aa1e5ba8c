package zookeeper_test

import (
	"errors"
	"path"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
	"github.com/go-zookeeper/zk"
)

// TestDigestACL: with WithDigest, a client without the credentials (or with
// wrong ones) cannot delete the holder's node, nor queue on the key; one
// with the credentials locks as usual.
func TestDigestACL(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	key := "acl/x"
	var node string
	a := dial(t, addr, zookeeper.WithPrefix(base), zookeeper.WithDigest("alice", "s3cret"),
		zookeeper.WithHooks(func(p string) { node = p }, nil, nil))
	l := mustAcquire(t, a, hold(key))
	if node == "" {
		t.Fatal("no queue node reported")
	}

	wrong := rawConn(t, addr)
	if err := wrong.AddAuth("digest", []byte("alice:guess")); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*zk.Conn{"no credentials": admin, "wrong password": wrong} {
		if err := c.Delete(node, -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("delete of the holder's node with %s: want ErrNoAuth, got %v", name, err)
		}
		if _, err := c.Create(path.Dir(node)+"/intruder", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("create under the lock node with %s: want ErrNoAuth, got %v", name, err)
		}
	}
	if ok, _, err := admin.Exists(node); err != nil || !ok {
		t.Fatalf("holder's node after the attempts: exists %v, err %v", ok, err)
	}

	stranger := dial(t, addr, zookeeper.WithPrefix(base))
	if sl, err := stranger.Acquire(bounded(t, 30*time.Second), try(key)); err == nil {
		_ = sl.Release(bounded(t, 30*time.Second))
		t.Errorf("an engine without credentials got the lock")
	} else if !errors.Is(err, zk.ErrNoAuth) || !errors.Is(err, engine.ErrAccessDenied) || errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("an engine without credentials: want zk.ErrNoAuth as ErrAccessDenied, not ErrUnavailable, got %v", err)
	}
	b := dial(t, addr, zookeeper.WithPrefix(base), zookeeper.WithDigest("alice", "s3cret"))
	if _, err := b.Acquire(bounded(t, 30*time.Second), try(key)); !errors.Is(err, engine.ErrNotAcquired) {
		t.Errorf("TryLock with the credentials on a held key: want ErrNotAcquired, got %v", err)
	}
	if l.Err() != nil || isDone(l) {
		t.Fatalf("holder lost its lease: %v", l.Err())
	}
	if err := l.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	next := mustAcquire(t, b, try(key))
	if err := next.Release(bounded(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if left, err := leftovers(admin, base, key); err != nil || len(left) > 0 {
		t.Errorf("leftovers: %v %v", left, err)
	}
}

package config

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// TestZooKeeperDigestBuild: a zookeeper engine built with username and
// password_env locks, and its lock node carries the digest ACL (everything
// for the user, READ for anyone else). A client without the credentials
// cannot delete the holder's node, and an engine built without them cannot
// take the key. String names the user and never the password.
func TestZooKeeperDigestBuild(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	const pw = "zk-digest-build-Q4m"
	t.Setenv("CERBERUS_TEST_ZK_PW", pw)
	prefix := fmt.Sprintf("/cerberus-config-digest-%d", time.Now().UnixNano())
	base := fmt.Sprintf(`engines: [{name: z, kind: zookeeper, addrs: [%q], prefix: %q`, addr, prefix)
	withCreds := base + `, username: locker, password_env: CERBERUS_TEST_ZK_PW}]`
	cfg, err := Parse([]byte(withCreds), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.String(); !strings.Contains(s, `username="locker"`) || strings.Contains(s, pw) {
		t.Errorf("String() = %s", s)
	}

	admin, _, err := zk.Connect([]string{addr}, 4*time.Second, zk.WithLogger(zkQuiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	const key = "digest/key"
	lockNode := prefix + "/" + zookeeper.EncodeKey(key)
	t.Cleanup(func() {
		// Deleting a node needs DELETE on its parent, and the base path
		// is open to everyone.
		_ = admin.Delete(lockNode, -1)
		_ = admin.Delete(prefix, -1)
	})

	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	req := engine.Request{Key: key, Mode: engine.Exclusive, TTL: 5 * time.Second, Renew: true}
	l, err := buildOne(t, withCreds).Acquire(ctx, req)
	if err != nil {
		t.Fatalf("with credentials: %v", err)
	}

	acl, _, err := admin.GetACL(lockNode)
	if err != nil {
		t.Fatal(err)
	}
	// The server shows a digest ID as user:x to a client that is not
	// authenticated as that user, so compare the user part only.
	want := []zk.ACL{{Scheme: "digest", ID: "locker", Perms: zk.PermAll}, {Scheme: "world", ID: "anyone", Perms: zk.PermRead}}
	if !sameACL(acl, want) {
		t.Errorf("ACL of %s = %+v, want %+v", lockNode, acl, want)
	}
	nodes, _, err := admin.Children(lockNode)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("queue of %s: %v %v", lockNode, nodes, err)
	}
	if err := admin.Delete(lockNode+"/"+nodes[0], -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("delete of the holder's node without credentials: want ErrNoAuth, got %v", err)
	}
	// Refused for want of credentials, not merely because the key is held.
	_, err = buildOne(t, base+"}]").Acquire(ctx, req)
	if !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("an engine without credentials: want zk.ErrNoAuth, got %v", err)
	} else if strings.Contains(err.Error(), pw) {
		t.Errorf("error holds the password: %v", err)
	}
	if l.Err() != nil {
		t.Errorf("holder lost its lease: %v", l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// sameACL compares two ACLs as sets, digest IDs by their user part.
func sameACL(a, b []zk.ACL) bool {
	key := func(x zk.ACL) string {
		id := x.ID
		if x.Scheme == "digest" {
			id, _, _ = strings.Cut(id, ":")
		}
		return fmt.Sprintf("%s|%s|%d", x.Scheme, id, x.Perms)
	}
	ka, kb := make([]string, len(a)), make([]string, len(b))
	for i, x := range a {
		ka[i] = key(x)
	}
	for i, x := range b {
		kb[i] = key(x)
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return slices.Equal(ka, kb)
}

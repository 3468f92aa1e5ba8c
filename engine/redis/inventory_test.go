package redis

import (
	"context"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestList runs enginetest.RunList on a single Redis server.
func TestList(t *testing.T) {
	addr := testenv.RedisAddr(t)
	enginetest.RunList(t, func() (engine.Engine, error) { return New(newClient(t, addr)) })
}

// TestClusterList runs enginetest.RunList on the three-master Cluster:
// the keys it holds land on different masters, and List scans them all.
func TestClusterList(t *testing.T) {
	addrs := testenv.RedisClusterAddrs(t)
	enginetest.RunList(t, func() (engine.Engine, error) { return New(newClusterClient(t, addrs)) })
}

// TestListBraceKey: a key holding '}' is stored under its hash; List
// with engine.AllKeys names it by its tag, and a glob character in the
// prefix matches only itself.
func TestListBraceKey(t *testing.T) {
	e := mustEngine(t, newClient(t, testenv.RedisAddr(t)), WithPrefix("inv-brace-"+t.Name()+":"))
	ctx := context.Background()
	l, err := e.Acquire(ctx, engine.Request{Key: "a}b", Mode: engine.Exclusive, Renew: true, TTL: engine.MinTTL * 100})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	inv, err := e.List(ctx, engine.AllKeys, 0)
	if err != nil || len(inv.Keys) != 1 || inv.Keys[0].Key != tagOf("a}b") || inv.Keys[0].Holders[0].Token != l.Token() {
		t.Fatalf("List(*) = %+v, %v; want the one key under its tag %s", inv, err, tagOf("a}b"))
	}
	if inv, err := e.List(ctx, "a*", 0); err != nil || len(inv.Keys) != 0 {
		t.Errorf("List(%q) = %+v, %v; want nothing: '*' in a prefix is literal", "a*", inv, err)
	}
}

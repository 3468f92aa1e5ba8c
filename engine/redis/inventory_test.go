package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

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
// with engine.AllKeys names it by its tag, with its writer's expiry, and a
// glob character in the prefix matches only itself.
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
	if left := time.Until(inv.Keys[0].Holders[0].Expires); left <= 0 || left > engine.MinTTL*100 {
		t.Errorf("the writer expires in %v; want within its 1s lease period", left)
	}
	if inv, err := e.List(ctx, "a*", 0); err != nil || len(inv.Keys) != 0 {
		t.Errorf("List(%q) = %+v, %v; want nothing: '*' in a prefix is literal", "a*", inv, err)
	}
}

// TestRedlockList runs enginetest.RunList on Redlock over the shared
// Redlock nodes: a key is listed with the holders a majority of them
// report.
func TestRedlockList(t *testing.T) {
	addrs := testenv.RedlockAddrs(t)
	enginetest.RunList(t, func() (engine.Engine, error) {
		clients := make([]Client, len(addrs))
		for i, a := range addrs {
			clients[i] = newClient(t, a)
		}
		return NewRedlock(clients)
	})
}

// TestRedlockListNeedsMajority: a key held through two of the five nodes
// (a failed attempt's leftovers) is not listed; held through three, it is.
func TestRedlockListNeedsMajority(t *testing.T) {
	addrs := testenv.RedlockAddrs(t)
	clients := make([]Client, len(addrs))
	for i, a := range addrs {
		clients[i] = newClient(t, a)
	}
	r, err := NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	key := fmt.Sprintf("inv-majority-%d", time.Now().UnixNano())
	for i := range 3 {
		l, err := r.nodes[i].Acquire(ctx, engine.Request{Key: key, Mode: engine.Exclusive, Renew: true,
			TTL: time.Minute, Value: "part"})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		inv, err := r.List(ctx, key, 0)
		if held := i+1 >= r.quorum; err != nil || (len(inv.Keys) == 1) != held {
			t.Errorf("held on %d of %d nodes: List = %+v, %v; want the key listed: %v", i+1, len(addrs), inv, err, held)
		}
	}
}

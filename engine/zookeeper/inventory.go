package zookeeper

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/go-zookeeper/zk"
)

var _ engine.Lister = (*Engine)(nil)

// List returns the keys held under prefix; see engine.Lister. It reads the
// children of the base path once (ZooKeeper does not page them: a base
// whose listing exceeds the server's jute.maxbuffer fails), unescapes them
// (DecodeKey) and keeps those under prefix, in key order. Then, key by
// key, it lists the key's queue and reads its holding nodes as Holders
// does; Granted is a node's ctime (when it joined the queue: the grant
// for a lease that did not wait), Waiters the queue nodes that do not
// hold. It stops at limit+1 held keys, or after 2*limit+16 keys read
// (locks whose last holder just left), and then sets More. It returns
// engine.ErrClosed after Close.
func (e *Engine) List(ctx context.Context, prefix string, limit int) (engine.Inventory, error) {
	prefix, limit, err := engine.CheckList(prefix, limit, e.Limits().MaxKeyLen)
	if err != nil {
		return engine.Inventory{}, err
	}
	if e.frame.Closed() {
		return engine.Inventory{}, engine.ErrClosed
	}
	bctx, cancel := e.bound(ctx)
	defer cancel()
	var children []string
	err = call(bctx, func() (err error) { children, _, err = e.conn.Children(e.base); return err })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return engine.Inventory{}, e.opError(ctx, "list", prefix, err)
	}
	var names []string
	for _, c := range children {
		if k, err := DecodeKey(c); err == nil && strings.HasPrefix(k, prefix) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var keys []engine.HeldKey
	more := false
	for i, k := range names {
		if len(keys) > limit || i >= 2*limit+16 {
			more = true
			break
		}
		hk, err := e.listKey(bctx, k)
		if err != nil {
			return engine.Inventory{}, e.opError(ctx, "list", k, err)
		}
		keys = append(keys, hk)
	}
	return engine.Collect(keys, prefix, limit, more), nil
}

// listKey reads key's queue and the data and stat of its holding nodes.
// A holding node gone before it is read is left out.
func (e *Engine) listKey(ctx context.Context, key string) (engine.HeldKey, error) {
	parent := e.base + "/" + EncodeKey(key)
	hk := engine.HeldKey{Key: key}
	var children []string
	err := call(ctx, func() (err error) { children, _, err = e.conn.Children(parent); return err })
	if errors.Is(err, zk.ErrNoNode) {
		return hk, nil
	}
	if err != nil {
		return hk, err
	}
	queued := 0
	for _, c := range children {
		if _, ok := parseNode(c); ok {
			queued++
		}
	}
	nodes := holding(children)
	hk.Waiters = queued - len(nodes)
	for _, n := range nodes {
		var (
			data []byte
			st   *zk.Stat
		)
		err := call(ctx, func() (err error) { data, st, err = e.conn.Get(parent + "/" + n.name); return err })
		switch {
		case errors.Is(err, zk.ErrNoNode) || (err == nil && (st == nil || st.Czxid <= 0)):
			continue
		case err != nil:
			return hk, err
		}
		mode := engine.Shared
		if n.write {
			mode = engine.Exclusive
		}
		hk.Holders = append(hk.Holders, engine.ListedHolder{
			Holder:  engine.Holder{Mode: mode, Token: uint64(st.Czxid), Value: string(data)},
			Granted: time.UnixMilli(st.Ctime)})
	}
	return hk, nil
}

package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Releaser = (*Engine)(nil)

// Tombstones. ForceRelease deletes the holding nodes of a key and, in the
// same multi, creates a persistent node beside each,
//
//	released-<unix milliseconds>-<the deleted node's name>
//
// which is no queue node (parseNode ignores it). The holder's node watch
// (lease.armWatch) fires, finds its node gone and its tombstone there,
// ends the lease with engine.ErrReleasedByOperator and deletes the
// tombstone. A tombstone nobody read (its holder's session had expired)
// is deleted by the next ForceRelease of the key once older than
// tombstoneLife, longer than any session timeout the engine accepts.
const (
	tombstonePrefix = "released-"
	tombstoneLife   = 10 * time.Minute
)

// releaseTries bounds the listings of one ForceRelease whose holders
// change under it.
const releaseTries = 5

// ForceRelease frees key whoever holds it; see engine.Releaser and the
// package documentation ("Force release"). One listing of the key's
// queue, a read of each holding node, and one multi that deletes them
// and writes their tombstones; if a holder left meanwhile, it lists again,
// up to releaseTries times. The next waiter's watch on the deleted node
// fires at once.
func (e *Engine) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	bctx, cancel := e.bound(ctx)
	defer cancel()
	parent := e.base + "/" + EncodeKey(key)
	for range releaseTries {
		hs, nodes, err := e.freeOnce(bctx, parent)
		if errors.Is(err, zk.ErrNoNode) {
			continue // a holder left, or a tombstone was read meanwhile
		}
		if err != nil {
			return nil, e.opError(ctx, "force release", key, err)
		}
		if len(hs) == 0 {
			return nil, fmt.Errorf("%w: %q: nobody holds it", engine.ErrNotHeld, key)
		}
		e.endReleased(nodes)
		return hs, nil
	}
	return nil, e.opError(ctx, "force release", key,
		fmt.Errorf("the holders kept changing over %d tries", releaseTries))
}

// freeOnce is one try of ForceRelease: it returns the holders it freed
// and their nodes' paths, or zk.ErrNoNode if one of them was gone first.
func (e *Engine) freeOnce(ctx context.Context, parent string) ([]engine.Holder, []string, error) {
	var children []string
	err := call(ctx, func() (err error) { children, _, err = e.conn.Children(parent); return err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	nodes := holding(children)
	if len(nodes) == 0 {
		return nil, nil, nil
	}
	hs, gone, err := e.readNodes(ctx, parent, nodes)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	ops := staleTombstones(parent, children, now)
	paths := make([]string, len(nodes))
	for i, n := range nodes {
		if gone[i] {
			return nil, nil, zk.ErrNoNode
		}
		paths[i] = parent + "/" + n.name
		tomb := parent + "/" + tombstonePrefix + strconv.FormatInt(now.UnixMilli(), 10) + "-" + n.name
		ops = append(ops, &zk.CreateRequest{Path: tomb, Acl: e.acl},
			&zk.DeleteRequest{Path: paths[i], Version: -1})
	}
	err = call(ctx, func() error { _, err := e.conn.Multi(ops...); return err })
	return hs, paths, err
}

// staleTombstones returns the deletes of the tombstones among children
// older than tombstoneLife.
func staleTombstones(parent string, children []string, now time.Time) []any {
	var ops []any
	for _, c := range children {
		ms, _, ok := parseTombstone(c)
		if ok && now.Sub(time.UnixMilli(ms)) > tombstoneLife {
			ops = append(ops, &zk.DeleteRequest{Path: parent + "/" + c, Version: -1})
		}
	}
	return ops
}

// parseTombstone splits a tombstone's name into its time and the name of
// the node it stands for.
func parseTombstone(name string) (ms int64, node string, ok bool) {
	rest, ok := strings.CutPrefix(name, tombstonePrefix)
	if !ok {
		return 0, "", false
	}
	t, node, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, "", false
	}
	ms, err := strconv.ParseInt(t, 10, 64)
	return ms, node, err == nil
}

// endReleased ends the engine's own leases on the nodes at paths with
// engine.ErrReleasedByOperator, at once; their tombstones are left for
// the next ForceRelease of the key.
func (e *Engine) endReleased(paths []string) {
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		want[p] = true
	}
	var ended []*lease
	e.mu.Lock()
	for l := range e.frame.AllLocked() {
		if want[l.path] {
			ended = append(ended, l)
		}
	}
	e.mu.Unlock()
	for _, l := range ended {
		l.finish(engine.ErrReleasedByOperator)
	}
}

// armWatch sets a data watch (getData) on the lease's node: it fires on a
// poke's or a release's setData and on the node's deletion, and
// handleEvent hands the event to nodeEvent. A data watch, not an exists
// watch: on a node that is gone it leaves no watch behind on the server.
// The engine keeps no goroutine per lease: the watch's channel, buffered
// by go-zookeeper, is not read. A node already gone ends the lease
// (nodeGone); a failed call is tried again after the recheck interval
// while the lease is held, and a lost session ends the lease by itself.
func (l *lease) armWatch() {
	e := l.eng
	for l.isHeld() {
		ctx, cancel := e.bound(e.frame.Context())
		err := call(ctx, func() error { _, _, _, err := e.conn.GetW(l.path); return err })
		cancel()
		switch {
		case err == nil:
			return
		case errors.Is(err, zk.ErrNoNode):
			l.nodeGone()
			return
		}
		select {
		case <-time.After(e.recheck):
		case <-l.Signal.Done():
			return
		case <-e.frame.Closing():
			return
		}
	}
}

// nodeEvent is handleEvent's for a watch on the node of lease l: unless
// l has ended, it sets the watch again, which finds out whether the node
// is gone, in the background.
func (e *Engine) nodeEvent(l *lease) {
	if !l.isHeld() {
		e.unwatch(l.path)
		return
	}
	e.frame.Go(l.armWatch)
}

// nodeGone ends a held lease whose node is gone, and deletes its
// tombstone if it has one.
func (l *lease) nodeGone() {
	if !l.isHeld() {
		return
	}
	e := l.eng
	ctx, cancel := e.bound(e.frame.Context())
	defer cancel()
	var children []string
	err := call(ctx, func() (err error) { children, _, err = e.conn.Children(l.parent); return err })
	name := path.Base(l.path)
	for _, c := range children {
		if _, node, ok := parseTombstone(c); ok && node == name && err == nil {
			if l.finish(fmt.Errorf("%w: zookeeper node %s deleted", engine.ErrReleasedByOperator, l.path)) {
				_ = call(ctx, func() error { return e.conn.Delete(l.parent+"/"+c, -1) })
			}
			return
		}
	}
	l.finish(fmt.Errorf("%w: zookeeper lock node %s is gone", engine.ErrLeaseLost, l.path))
}

// isHeld reports whether the lease is held and no release is under way.
func (l *lease) isHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == held
}

// watch records l as the lease whose watch is on its node.
func (e *Engine) watch(l *lease) {
	e.watchMu.Lock()
	if e.watched == nil {
		e.watched = make(map[string]*lease)
	}
	e.watched[l.path] = l
	e.watchMu.Unlock()
}

// unwatch forgets the lease of the node at path.
func (e *Engine) unwatch(path string) {
	e.watchMu.Lock()
	delete(e.watched, path)
	e.watchMu.Unlock()
}

// watcher returns the lease whose watch is on the node at path, if any.
func (e *Engine) watcher(path string) (*lease, bool) {
	e.watchMu.Lock()
	defer e.watchMu.Unlock()
	l, ok := e.watched[path]
	return l, ok
}

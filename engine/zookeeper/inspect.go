package zookeeper

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/go-zookeeper/zk"
)

// holderReads bounds the data reads Holders has in flight at once.
const holderReads = 16

// Holders returns the leases that hold key now, in grant order; see
// engine.Inspector. It lists the key's queue and applies the grant rule of
// Acquire to it, so a node whose turn has come is listed even if its
// waiter has not yet seen the change; then it reads the data (Value) and
// czxid (Token) of each holding node, a few reads at a time. If a holding
// node is gone by then, the holders have changed (a release may have let
// the next node in), so it lists again, up to holderTries times; the last
// try leaves gone nodes out. Nodes of an expired session are gone from the
// server, so never listed; a holder whose session the server has not yet
// expired still is. The reads are ZooKeeper's: sequentially consistent,
// from the server the engine's session is on, which may lag the leader.
// It returns engine.ErrClosed after Close.
func (e *Engine) Holders(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	bctx, cancel := e.bound(ctx)
	defer cancel()
	parent := e.base + "/" + EncodeKey(key)
	for try := 1; ; try++ {
		hs, changed, err := e.readHolders(bctx, parent)
		if err != nil {
			return nil, e.opError(ctx, "holders", key, err)
		}
		if !changed || try == holderTries {
			return hs, nil
		}
	}
}

// holderTries bounds the listings of one Holders call.
const holderTries = 3

// readHolders lists the queue under parent, applies the grant rule and
// reads the holding nodes. changed reports that one of them was gone
// before it was read; it is left out.
func (e *Engine) readHolders(ctx context.Context, parent string) (hs []engine.Holder, changed bool, err error) {
	var children []string
	err = call(ctx, func() (err error) { children, _, err = e.conn.Children(parent); return err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	nodes := holding(children)
	if len(nodes) == 0 {
		return nil, false, nil
	}
	reads, err := e.readNodes(ctx, parent, nodes)
	if err != nil {
		return nil, false, err
	}
	for _, r := range reads {
		if r.gone {
			changed = true
			continue
		}
		hs = append(hs, r.Holder)
	}
	return hs, changed, nil
}

// nodeRead is what readNodes learns of one holding node.
type nodeRead struct {
	engine.Holder
	owner int64 // the session that owns it (its ephemeralOwner)
	gone  bool  // it no longer exists
}

// readNodes reads the holding nodes under parent, a few at a time.
func (e *Engine) readNodes(ctx context.Context, parent string, nodes []qnode) ([]nodeRead, error) {
	out := make([]nodeRead, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	sem := make(chan struct{}, holderReads)
	for i, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var (
				data []byte
				st   *zk.Stat
			)
			err := call(ctx, func() (err error) { data, st, err = e.conn.Get(parent + "/" + n.name); return err })
			switch {
			case errors.Is(err, zk.ErrNoNode):
				out[i].gone = true
			case err != nil:
				errs[i] = err
			case st == nil || st.Czxid <= 0:
				out[i].gone = true
			default:
				mode := engine.Shared
				if n.write {
					mode = engine.Exclusive
				}
				out[i] = nodeRead{Holder: engine.Holder{Mode: mode, Token: uint64(st.Czxid), Value: string(data)},
					owner: st.EphemeralOwner}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, errs[firstErr(errs)]
	}
	return out, nil
}

// firstErr returns the index of the first non-nil error of errs.
func firstErr(errs []error) int {
	for i, err := range errs {
		if err != nil {
			return i
		}
	}
	return 0
}

// Watch reports changes to key's queue from a ZooKeeper child watch on its
// lock node (grants and releases, and waiters joining or leaving, which
// may change nothing for holders); see engine.Watcher. The watch is set
// again after each notification. While the lock node does not exist, an
// exists watch waits for its creation instead. A connection that drops
// keeps the watch (go-zookeeper sets it again on the same session), but a
// change while it was down may go untold, so one notification is sent
// when the session is back; a watch the server dropped with an expired
// session is set again on the new one. The channel is closed when ctx
// ends or the engine closes. It returns engine.ErrClosed after Close.
func (e *Engine) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	parent := e.base + "/" + EncodeKey(key)
	// Armed before Watch returns while the session is up, so that a change
	// made right after is told; with the session down the loop arms it
	// once the session is back.
	first, err := e.armNow(ctx, parent)
	if err != nil {
		return nil, e.opError(ctx, "watch", key, err)
	}
	wctx, cancel := e.frame.Bind(ctx)
	out := make(chan struct{}, 1)
	run := func() {
		defer close(out)
		defer cancel()
		e.watchKey(wctx, parent, out, first)
	}
	if !e.frame.Go(run) {
		cancel()
		return nil, engine.ErrClosed
	}
	return out, nil
}

// armed is a watch set on a lock node while the session was up: its
// event channel (nil if the node was created between the two calls that
// set it) and the session's down signal at the time.
type armed struct {
	ch   <-chan zk.Event
	down <-chan struct{}
}

// armNow sets the watch of Watch at once if the session is up, and
// returns nil if it is not.
func (e *Engine) armNow(ctx context.Context, parent string) (*armed, error) {
	e.mu.Lock()
	up, down := e.sess.up, e.sess.down
	e.mu.Unlock()
	if !up {
		return nil, nil
	}
	ch, err := e.armWatch(ctx, parent)
	if err != nil {
		return nil, err
	}
	return &armed{ch: ch, down: down}, nil
}

// watchKey runs one Watch until ctx ends, starting with first if it was
// armed already.
func (e *Engine) watchKey(ctx context.Context, parent string, out chan<- struct{}, first *armed) {
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	backoff := 50 * time.Millisecond
	for {
		var down <-chan struct{}
		var ch <-chan zk.Event
		var err error
		if first != nil {
			down, ch, first = first.down, first.ch, nil
		} else {
			var ok bool
			if down, ok = e.waitUp(ctx); !ok {
				return
			}
			ch, err = e.armWatch(ctx, parent)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Wait before trying again (the session may have dropped
			// meanwhile), then tell: something may have changed.
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			notify()
			continue
		}
		backoff = 50 * time.Millisecond
		if ch == nil { // the lock node appeared just now
			notify()
			continue
		}
	armed:
		for {
			select {
			case <-ch:
				// A change, or the end of the watch with its session:
				// either way tell, and set it again.
				notify()
				break armed
			case <-down:
				// The watch stays registered and go-zookeeper sets it
				// again if the same session is back; a change while the
				// connection was down may go untold, so tell once then.
				var ok bool
				if down, ok = e.waitUp(ctx); !ok {
					return
				}
				notify()
			case <-ctx.Done():
				return
			}
		}
	}
}

// waitUp waits until the engine has a session, or ctx ends (ok false), and
// returns the channel that closes when it drops again.
func (e *Engine) waitUp(ctx context.Context) (down <-chan struct{}, ok bool) {
	for {
		e.mu.Lock()
		up, ready, d := e.sess.up, e.sess.ready, e.sess.down
		e.mu.Unlock()
		if up {
			return d, true
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// armWatch sets a child watch on the lock node parent, or, if it does not
// exist, an exists watch that fires when it is created. It returns a nil
// channel if the node was created between the two calls.
func (e *Engine) armWatch(ctx context.Context, parent string) (<-chan zk.Event, error) {
	_, ch, err := e.armChildren(ctx, parent)
	return ch, err
}

// armChildren is armWatch on the node at p, and returns p's children
// too (none while it does not exist).
func (e *Engine) armChildren(ctx context.Context, p string) ([]string, <-chan zk.Event, error) {
	var (
		children []string
		ch       <-chan zk.Event
	)
	err := call(ctx, func() error {
		kids, _, c, err := e.conn.ChildrenW(p)
		if !errors.Is(err, zk.ErrNoNode) {
			children, ch = kids, c
			return err
		}
		found, _, c, err := e.conn.ExistsW(p)
		if err == nil && !found {
			ch = c
		}
		return err
	})
	if err != nil {
		return nil, nil, err // children and ch may still be written by an abandoned call
	}
	return children, ch, nil
}

package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
	"github.com/go-zookeeper/zk"
)

// Acquire grants a lease; see engine.Engine.
//
// It creates a queue node (see the package documentation), lists the key's
// queue and is granted when no node it must wait for is left. Otherwise,
// without req.Wait, it deletes its node and returns engine.ErrNotAcquired;
// with req.Wait it watches only the node it waits for and lists again when
// that node goes, when DefaultRecheck (or WithRecheck) passes, or when the
// watch is lost. When ctx ends it deletes its node and returns
// errors.Join(engine.ErrNotAcquired, ctx.Err()); when the engine closes,
// engine.ErrClosed. A connection that drops while the request waits does
// not end the wait: its node lives as long as the session, so it waits for
// the session to be back and lists again, and fails only if the session
// is lost. Server and session failures are *engine.OpError values
// wrapping engine.ErrUnavailable, and refusals by ACLs ones wrapping
// engine.ErrAccessDenied; the node is deleted then too, now or when the
// session is back.
func (e *Engine) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := e.frame.Enter(ctx, e.Validate(req)); err != nil {
		return nil, err
	}
	defer e.frame.Exit()
	actx, cancel := e.frame.Bind(ctx)
	defer cancel()
	l, err := e.acquire(actx, req)
	if err == nil {
		return l, nil
	}
	switch {
	case errors.Is(context.Cause(actx), engine.ErrClosed):
		return nil, engine.ErrClosed
	case ctx.Err() != nil:
		return nil, errors.Join(engine.ErrNotAcquired, ctx.Err())
	case errors.Is(err, engine.ErrNotAcquired):
		return nil, err
	}
	return nil, e.opError(ctx, "acquire", req.Key, err)
}

// acquire does the work of Acquire. Errors from ctx are sorted out by the
// caller.
//
// The queue work runs in one worker goroutine that makes its go-zookeeper
// calls (which take no context) directly, so a grant costs one goroutine
// hand-off however many round trips it takes. The worker watches ctx
// between calls and while it waits; when ctx ends it deletes its node (a
// grant that raced with the end of ctx is given back too), and acquire
// waits for that up to kit.UndoWait before it returns.
func (e *Engine) acquire(ctx context.Context, req engine.Request) (*lease, error) {
	ep, err := e.awaitSession(ctx)
	if err != nil {
		return nil, err
	}
	type result struct {
		l   *lease
		err error
	}
	res := make(chan result, 1)
	work := func() {
		l, err := e.queue(ctx, req, ep)
		res <- result{l, err}
	}
	if !e.frame.Go(work) { // Close has begun; the end of the session removes nodes anyway
		return nil, engine.ErrClosed
	}
	select {
	case r := <-res:
		return r.l, r.err
	case <-ctx.Done():
	}
	// The worker deletes its node when it sees ctx end; wait for that no
	// longer than kit.UndoWait, then let it finish in the background.
	done := make(chan struct{})
	go func() {
		defer close(done)
		if r := <-res; r.err == nil {
			// Granted just as ctx ended: the caller gets no lease, so
			// give the node up.
			r.l.drop()
		}
	}()
	kit.WaitUpTo(done, kit.UndoWait)
	return nil, ctx.Err()
}

// queue creates the queue node and waits its turn, checking ctx between
// server calls. On any failure it deletes its node before returning.
func (e *Engine) queue(ctx context.Context, req engine.Request, ep epochState) (*lease, error) {
	parent := e.base + "/" + EncodeKey(req.Key)
	guid := newGUID()
	var data []byte
	if req.Value != "" {
		data = []byte(req.Value)
	}
	own, pst, err := e.createNode(parent, guid, kindOf(req), data)
	if err != nil {
		if connErr(err) {
			// The node may exist after all: find it by its GUID later.
			e.orphan(orphan{parent: parent, guid: guid, sid: ep.sid})
		}
		return nil, err
	}
	q := &queued{e: e, req: req, ep: ep, parent: parent, own: own, name: path.Base(own)}
	// Nodes only join the queue behind existing ones, so the lock node's
	// child count just after the create bounds how many are ever ahead.
	q.crowded = q.counted() && (pst == nil || int(pst.NumChildren)-1 >= req.Limit)
	if err := ctx.Err(); err != nil {
		return nil, q.giveUp(err)
	}
	if h := e.hooks; h != nil && h.queued != nil {
		h.queued(own)
	}
	q.askToken(pst)
	// head is set when the engine knows, without listing, that no node
	// ahead of its own can block it: its node was the lock node's only
	// child when it was created, or the one node it waited for is gone.
	head := pst != nil && pst.NumChildren == 1
	armed := false // list with a child watch
	for {
		var (
			w     wait
			child <-chan zk.Event
		)
		if !head {
			if w, child, err = q.list(ctx, armed); errors.Is(err, errAgain) {
				continue
			} else if err != nil {
				return nil, err
			}
		}
		if head || w.granted() {
			if w.poke && q.crowded {
				q.poke()
			}
			return q.grant(ctx)
		}
		if !req.Wait {
			return nil, q.giveUp(fmt.Errorf("%w: %q is held", engine.ErrNotAcquired, req.Key))
		}
		if w.counted && child == nil {
			// Every node ahead holds and any may leave: list again, this
			// time with a child watch.
			armed = true
			continue
		}
		armed = false
		if !w.counted {
			child = nil // wait on w.block
		}
		if head, err = q.await(ctx, w, child); err != nil && !errors.Is(err, errAgain) {
			return nil, err
		}
	}
}

// queued is a request's node in the lock node's queue, from its creation
// to its grant.
type queued struct {
	e   *Engine
	req engine.Request
	ep  epochState

	parent, own, name string // the lock node; the queue node, its full path and name

	token   uint64          // the node's czxid; 0 until known
	statc   chan statResult // nil unless the czxid is asked for
	crowded bool            // a counted request that may have been seen held back by the count
}

// counted reports whether the request is a counted shared one.
func (q *queued) counted() bool { return q.req.Mode == engine.Shared && q.req.Limit > 0 }

// giveUp deletes the queue node and returns err.
func (q *queued) giveUp(err error) error {
	q.e.dropNode(q.own, q.parent, q.ep.sid)
	return err
}

// errAgain is outlast's word that the session is back: list again.
var errAgain = errors.New("zookeeper: the session is back")

// outlast handles a failed read of a waiting request. A dropped connection
// (go-zookeeper's ErrConnectionClosed, or ErrNoServer while it dials) does
// not end the session, nor the request's ephemeral node: outlast waits
// for the session to be back and returns errAgain, so that the request
// lists its queue again, as its leases carry on. It gives up (deleting
// the node, now or once the session is back) if the session's epoch ends
// first (the session timer or an expiry), if ctx ends, or on any other
// error.
func (q *queued) outlast(ctx context.Context, err error) error {
	if !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer) {
		return q.giveUp(err)
	}
	q.e.mu.Lock()
	up, ready := q.e.sess.up, q.e.sess.ready
	q.e.mu.Unlock()
	if !up {
		select {
		case <-ready:
		case <-q.ep.lost:
		case <-ctx.Done():
			return q.giveUp(ctx.Err())
		}
	}
	// Up already: the error came before go-zookeeper reported the
	// disconnect, and the next read waits in its queue for the new
	// connection.
	select {
	case <-q.ep.lost:
		return q.giveUp(fmt.Errorf("%w: session lost while waiting", errNoSession))
	default:
		return errAgain
	}
}

// askToken takes the token, the node's czxid, off the lock node's Stat,
// which createNode read. Only a create recovered by its GUID after a lost
// reply has no Stat: then the czxid is asked for alongside the first
// listing, and the two reads cost one round trip.
func (q *queued) askToken(pst *zk.Stat) {
	if pst != nil && pst.Mzxid > 0 {
		q.token = uint64(pst.Mzxid)
		return
	}
	q.statc = make(chan statResult, 1)
	go func() {
		_, st, err := q.e.conn.Exists(q.own)
		q.e.existsCalls.Add(1)
		q.statc <- statResult{st, err}
	}()
}

// list lists the queue and decides what the request waits for. With watch
// the listing sets a child watch on the lock node, returned as child.
func (q *queued) list(ctx context.Context, watch bool) (w wait, child <-chan zk.Event, err error) {
	var children []string
	if watch {
		children, _, child, err = q.e.conn.ChildrenW(q.parent)
		if err == nil {
			if h := q.e.hooks; h != nil && h.watching != nil {
				h.watching(q.parent)
			}
		}
	} else {
		children, _, err = q.e.conn.Children(q.parent)
	}
	q.e.listings.Add(1)
	if err != nil {
		return wait{}, nil, q.outlast(ctx, err)
	}
	if err := ctx.Err(); err != nil {
		return wait{}, nil, q.giveUp(err)
	}
	w, found := blocker(children, q.name)
	if !found {
		// Only a lost session removes our ephemeral node.
		return wait{}, nil, fmt.Errorf("%w: queue node %s vanished", errNoSession, q.own)
	}
	return w, child, nil
}

// poke tells the counted reader just behind the request's node, which may
// be watching it because it saw it held back by the count, that it is
// granted now: it rewrites the node's data (its Value, unchanged), which
// fires that reader's data watch. It costs a write only on a counted grant
// that found a counted reader queued behind it, of a node that had at
// least Limit nodes ahead when it was created (with fewer, no one can
// ever have seen it held back), and runs in the background. A reader that
// set its watch after the poke sees the node's data version above 0 and
// lists at once.
func (q *queued) poke() {
	e, node, data := q.e, q.own, []byte(q.req.Value)
	_ = e.frame.Go(func() {
		e.pokes.Add(1)
		ctx, cancel := context.WithTimeout(e.frame.Context(), e.sessionTimeout())
		defer cancel()
		_ = call(ctx, func() error {
			_, err := e.conn.Multi(&zk.SetDataRequest{Path: node, Data: data, Version: -1})
			return err
		})
	})
}

// grant makes the lease once nothing ahead blocks the request, waiting for
// the czxid if it was asked for.
func (q *queued) grant(ctx context.Context) (*lease, error) {
	if q.token == 0 {
		select {
		case r := <-q.statc:
			if r.err != nil {
				return nil, q.giveUp(r.err)
			}
			if r.stat == nil || r.stat.Czxid <= 0 {
				return nil, q.giveUp(fmt.Errorf("zookeeper: no czxid for %s", q.own))
			}
			q.token = uint64(r.stat.Czxid)
		case <-ctx.Done():
			return nil, q.giveUp(ctx.Err())
		}
	}
	return q.e.grant(q.req, q.own, q.parent, q.token, q.ep)
}

// await waits until what holds the request back may have changed: the
// child watch set by its listing when child is not nil (a counted reader
// behind holders only), else a data watch on w.block, the node ahead it
// waits for. It returns when the watch fires, the bounded re-check comes
// due, the session is lost or ctx ends. head reports whether the change
// puts the request at the head of the queue, so it need not list again.
func (q *queued) await(ctx context.Context, w wait, child <-chan zk.Event) (head bool, err error) {
	watch := child
	if watch == nil {
		_, st, ch, err := q.e.conn.GetW(q.parent + "/" + w.block)
		if errors.Is(err, zk.ErrNoNode) {
			return false, nil // gone already: list again
		}
		if err != nil {
			return false, q.outlast(ctx, err)
		}
		if w.ahead == 0 && st != nil && st.Version > 0 {
			// Held back by the count, we watch a counted reader that
			// was poked: it is granted already. List again.
			return false, nil
		}
		if h := q.e.hooks; h != nil && h.watching != nil {
			h.watching(q.parent + "/" + w.block)
		}
		watch = ch
	}
	recheck := time.NewTimer(q.e.recheck)
	defer recheck.Stop()
	select {
	case ev := <-watch:
		if child != nil {
			return false, nil
		}
		// If the node we watched was the only one ahead that could block
		// us, its deletion puts us at the head: the server numbers new
		// nodes above every existing one, so nothing can join the queue
		// ahead of ours. So does the release of a writer that held the
		// key (see releaseNode), whatever was ahead when we listed: only
		// nodes between it and ours can be left. Both save a listing on a
		// hand-off, when the nodes that may be left fit a counted
		// reader's limit. Anything else (a lost watch, a reader's release
		// or poke), list again.
		switch ev.Type {
		case zk.EventNodeDeleted:
			return w.ahead == 1 && fits(w.before-1, q.req.Limit), nil
		case zk.EventNodeDataChanged:
			return isWriter(w.block) && fits(w.between, q.req.Limit), nil
		}
	case <-recheck.C:
	case <-q.ep.lost:
		return false, q.giveUp(fmt.Errorf("%w: session lost while waiting", errNoSession))
	case <-ctx.Done():
		return false, q.giveUp(ctx.Err())
	}
	return false, nil
}

// grant turns a node at the head of the queue into a lease, unless the
// engine closed or the session's epoch ended meanwhile.
func (e *Engine) grant(req engine.Request, own, parent string, token uint64,
	ep epochState) (*lease, error) {
	if len(own) > len(parent) && own[len(parent)] == '/' && strings.HasPrefix(own, parent) {
		parent = own[:len(parent)] // the node's path holds it: keep one string, not two
	}
	l := &lease{
		LeaseCore: kit.NewLeaseCore(req.Key, req.Mode, req.OnLost), eng: e,
		path: own, parent: parent, sid: ep.sid,
	}
	l.SetToken(token)
	if err := e.frame.Track(l, func() error {
		if e.sess.epoch != ep.epoch {
			return fmt.Errorf("%w: session lost during acquire", errNoSession)
		}
		if !req.Renew {
			l.mu.Lock()
			l.timer = time.AfterFunc(req.TTL, l.expire)
			l.mu.Unlock()
		}
		return nil
	}); err != nil {
		e.dropNode(own, parent, ep.sid)
		return nil, err
	}
	return l, nil
}

// statResult is the answer to an Exists call.
type statResult struct {
	stat *zk.Stat
	err  error
}

// createNode makes the queue node in protected mode, with data (the
// request's Value), creating the key's lock node (a container) and the
// base path when they are missing. It returns the node's path and, unless the node was recovered by its GUID
// after a lost reply, the lock node's Stat just after the create.
//
// The create travels in one multi with an unconditional, empty setData on
// the lock node: a multi is one transaction with one zxid, so the lock
// node's mzxid in the setData's reply is the new node's czxid (the token),
// and its child count says whether the new node is alone in the queue.
// go-zookeeper's Create returns only the path, and reading either fact
// would cost another round trip. The setData rides in the same write, so
// the server logs and syncs it once either way.
func (e *Engine) createNode(parent, guid, kind string, data []byte) (string, *zk.Stat, error) {
	prefix := parent + "/" + protectedPrefix + guid + "-" + kind
	var err error
	for range 8 {
		var res []zk.MultiResponse
		res, err = e.conn.Multi(
			&zk.CreateRequest{Path: prefix, Data: data, Acl: e.acl, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: parent, Version: -1})
		switch {
		case err == nil:
			if len(res) != 2 || res[0].String == "" {
				return "", nil, fmt.Errorf("zookeeper: malformed reply to the create of a queue node under %s",
					parent)
			}
			return res[0].String, res[1].Stat, nil
		case errors.Is(err, zk.ErrNoNode):
			if err := e.ensureParent(parent); err != nil {
				return "", nil, err
			}
		case errors.Is(err, zk.ErrConnectionClosed):
			// The reply was lost; the node may exist. Look for our GUID.
			p, found, ferr := e.findGUID(context.Background(), parent, guid)
			if ferr != nil {
				return "", nil, err
			}
			if found {
				return p, nil, nil
			}
		default:
			return "", nil, err
		}
	}
	return "", nil, fmt.Errorf("zookeeper: could not create a queue node under %s: %w", parent, err)
}

// ensureParent creates the key's lock node as a container, so the server
// removes it once it has had children and has none, and the base path as
// persistent nodes.
func (e *Engine) ensureParent(parent string) error {
	for range 2 {
		_, err := e.conn.CreateContainer(parent, nil, zk.FlagContainer, e.acl)
		if err == nil || errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		p := ""
		for _, part := range strings.Split(strings.TrimPrefix(e.base, "/"), "/") {
			p += "/" + part
			_, err := e.conn.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll))
			if err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
	}
	return nil
}

// findGUID looks for the node of a protected create among parent's children.
func (e *Engine) findGUID(ctx context.Context, parent, guid string) (string, bool, error) {
	var children []string
	err := call(ctx, func() (err error) { children, _, err = e.conn.Children(parent); return err })
	if errors.Is(err, zk.ErrNoNode) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	for _, c := range children {
		if guidOf(c) == guid {
			return parent + "/" + c, true, nil
		}
	}
	return "", false, nil
}

// dropNode deletes a queue node the engine no longer wants, within the
// session timeout. If the connection is down, the node is deleted when the
// session is back.
func (e *Engine) dropNode(node, parent string, sid int64) {
	ctx, cancel := context.WithTimeout(context.Background(), e.sessionTimeout())
	defer cancel()
	err := e.removeNode(ctx, node)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		e.orphan(orphan{parent: parent, path: node, sid: sid})
	}
}

// removeNode deletes a queue node. The key's lock node is left to the
// server, which removes it as an empty container: deleting it here would
// cost a write on every release and another to create it again on the next
// acquisition (see the package documentation).
func (e *Engine) removeNode(ctx context.Context, node string) error {
	return call(ctx, func() error { return e.conn.Delete(node, -1) })
}

// releasedData is what a holder of an exclusive lease writes on its queue
// node in the transaction that deletes it; see releaseNode.
var releasedData = []byte("released")

// releaseNode deletes the queue node of an exclusive lease its holder
// releases, in one multi with a setData on the node just before. The data
// change fires the successor's data watch (consuming it; the delete fires
// nothing more) and tells the successor that the node it waited for was a
// writer that held the key: every node below it was gone when it was
// granted, and no node can join below a later one, so the successor is at
// the head of the queue without listing it again. A waiter that gives up,
// an expired lease, a lost session or a shared lease's release deletes its
// node plainly, and its successor lists the queue.
func (e *Engine) releaseNode(ctx context.Context, node string) error {
	return call(ctx, func() error {
		_, err := e.conn.Multi(
			&zk.SetDataRequest{Path: node, Data: releasedData, Version: -1},
			&zk.DeleteRequest{Path: node, Version: -1})
		return err
	})
}

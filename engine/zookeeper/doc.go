// Package zookeeper is the ZooKeeper engine: the lock recipe from the
// ZooKeeper documentation on github.com/go-zookeeper/zk, with shared and
// counted locks, cancellable waits, Holders and Watch, and an honest view
// of the session.
//
// # Layout
//
// Each key has a lock node under the base path (DefaultPrefix,
// "/cerberus/locks", under an optional chroot), named by EncodeKey, a
// reversible percent-escaping that makes every valid key one znode name.
// The lock node is a container node: the server deletes it once its queue
// is empty (ZooKeeper checks every znode.container.checkIntervalMs, a
// minute by default), also when its last holder crashed, so distinct keys
// leave nothing behind. The engine does not delete lock nodes itself: that
// would cost a write on every release and another to create the node again
// on the next acquisition of the key, and ZooKeeper's cost is its writes.
// Beside the lock nodes, "%released" holds force release's tombstones
// (see Force release).
//
// # Acquire
//
// An acquisition creates an ephemeral sequential queue node under the key's
// lock node, in protected mode: its name carries a GUID, so a create whose
// reply is lost to a connection drop is found again rather than made twice
// (see queue.go for the names). Unless the node is alone in the queue (see
// Tokens), it then lists the queue. The lowest node holds the lock; a
// waiter sets a watch on the one node it waits for, so a release wakes
// exactly one waiter (no herd), and waiters are served in queue order.
// Shared mode uses "read-" and "write-" nodes: a reader waits for the next
// lower writer only, a writer for the next lower node of either kind; a
// reader queued behind a writer never waits for writers that came after
// it. When the watched node was the only one ahead that could block
// the waiter, its deletion is the waiter's turn and it is granted without
// listing again (the server numbers new nodes above every existing one, so
// no node can join ahead of it). So is the release of a writer that held
// the key, whatever was ahead of the waiter when it listed: the holder
// writes its node's data in the transaction that deletes it, the waiter's
// data watch fires on that change, and a writer was only granted once every
// node below it was gone. Either way a hand-off costs the release's one
// write and one notification. Otherwise (a waiter ahead gave up, a reader
// released, a session ended) the waiter lists again.
//
// The watch is a data watch (getData) on that node: it fires on
// deletion like an exists watch, but unlike one it is not left registered
// when the node is already gone.
//
// A waiter whose context ends, or whose engine closes, deletes its node
// before it returns; a create abandoned mid-flight is cleaned up when it
// completes, or found by its GUID when the session is back.
//
// A queue node's data is the request's Value (empty when none is given),
// written by the create itself.
//
// # Counting
//
// A counted shared request (Request.Limit N) makes a reader node whose
// name also carries the limit ("-limitN-read-", see queue.go); it still
// ends in "-read-<seq>", so an engine that knows no limits sees a reader.
// It is granted when no writer is ahead of it and fewer than N nodes are:
// those are all readers then, holding (or waiting on the count
// themselves), so never more than N counted readers hold the key, on the
// server's one ordering of the queue, whichever process asks. Later nodes
// never count, so waiters are served in arrival order, and a crashed
// holder's node goes with its session, as any lease's does. The count is
// checked against the limit of the node being granted, as engine.Request
// says; every holder of a key should ask the same one.
//
// A counted waiter behind a writer waits for that writer as any reader
// does; when the writer goes it is granted without listing if the nodes
// that may be left ahead of it fit its limit, and lists otherwise. Held
// back by the count alone, a waiter cannot know which holder will leave
// first, so:
//
//   - if the node just ahead of it waits on the count too, it watches that
//     node (a data watch, as above). When that node is granted (after a
//     listing that shows a counted reader behind it) it rewrites its own
//     data, unchanged, which fires the watch: a "poke", the one extra
//     write of the counted mode, made only on a grant with a counted
//     waiter right behind, of a node created with at least N nodes ahead
//     (the create's reply tells the lock node's child count; with fewer
//     ahead no one can ever have seen it held back). A waiter whose watch
//     comes after the poke sees the node's data version above 0 and lists
//     at once. A waiter just ahead that gives up deletes its node, which
//     fires the watch too.
//   - otherwise every node ahead holds, and it lists with a child watch
//     on the lock node, which fires at the next release (or at the next
//     arrival, after which it lists and watches again).
//
// So only the first waiter of a key watches its children, and each
// release wakes at most two waiters (the first one, and through its poke
// the one behind it), however long the queue: no herd. The bounded
// re-check (WithRecheck) covers counted waits too. A TryLock that finds
// the count full deletes its node and returns engine.ErrNotAcquired.
//
// # Inspection
//
// Engine.Holders lists the key's queue, applies the grant rule to it (a
// leading writer alone, or the readers before the first writer, a counted
// one only within its limit), then reads the data and czxid of each
// holding node, up to 16 at a time: one listing plus one read per holder,
// all served by the server the session is on (ZooKeeper's reads are
// sequentially consistent, so another client's change may show a moment
// later). A holding node gone before its read means the holders changed
// meanwhile, so it lists again, up to three listings in all. A node whose
// holder crashed is listed until the server expires its session, as it
// holds the key until then.
//
// Engine.Watch sets a child watch on the key's lock node (an exists watch
// while the node does not exist) and sets it again after each event; each
// event is a notification. Child events come with every arrival and
// departure, so some notifications change nothing for Holders. A
// connection that drops keeps its watches (go-zookeeper sets them again on
// the same session), but the engine sends one notification when the
// session is back, as a change may have gone untold; a new session after
// an expiry gets new watches. The watch goroutine ends when its context
// ends or the engine closes, and Close waits for it.
//
// # Force release
//
// Engine.ForceRelease (engine.Releaser) lists the key's queue and reads
// the holding nodes as Holders does, with each one's ephemeralOwner (the
// holder's session). It creates the tombstone folder of each holder's
// session, "<base>/%released/<session id in hex>" (container nodes, an
// existing one left as it is), then deletes the holding nodes in one
// multi that also creates a persistent tombstone
// "<unix ms>-<czxid>" per freed node in its session's folder; if a holder
// left meanwhile the multi fails and it lists again, up to five times.
// "%released" is no encoded key, so it never shows in List and no key
// can take its name. The next waiter's watch on a deleted node fires at
// once and it is granted with a new node, so a larger czxid. A key nobody
// holds is engine.ErrNotHeld.
//
// Each engine keeps one watch, whatever it holds: a child watch on its
// own session's folder (an exists watch while it does not exist), set
// again after every event and on the folder of each new session, by one
// goroutine. When it fires, the engine lists the folder, ends the leases
// the tombstones name (same session, token the czxid) with
// engine.ErrReleasedByOperator, and deletes those tombstones. So a holder
// in any process is told at once; one stopped (SIGSTOP) for less than the
// session timeout reads the notification when it resumes; one stopped
// longer has lost its session, and is told that (engine.ErrLeaseLost). A
// lease of the releasing engine itself ends at once. Its later Release
// returns engine.ErrNotHeld and deletes nothing of anyone else's (its
// node name is its own). A tombstone that names no lease of the engine
// (its grant may still be under way) is kept for the session timeout,
// read again then, and deleted. Tombstones nobody read (their session
// had ended) are swept by later ForceRelease calls once older than ten
// minutes, by the writers' clocks, with session folders empty that long:
// each call looks at up to 8 folders, from a random one, and deletes up
// to 64 nodes. The cost: a create per holder's session and one multi per
// force release, one notification and a listing per release to its
// holder's engine; nothing per grant, one watch per engine on the server.
//
// # Tokens
//
// Lease.Token is the czxid of the holder's node. Every create is a new
// transaction with a larger zxid than any before it on the ensemble, and
// queue order is creation order, so tokens strictly increase over the
// grants of a key, across sessions, clients and restarts. go-zookeeper's
// Create returns only the path, so the create is sent as a multi together
// with an empty, unconditional setData on the lock node. A multi is one
// transaction with one zxid, so the lock node's mzxid in the setData's
// reply is the new node's czxid, and its child count tells whether the new
// node is alone: if it is, the lease is granted with no listing at all, and
// an uncontended acquisition costs that one write. Only a create recovered
// by its GUID after a lost reply asks for the czxid with an exists call,
// sent together with its first listing.
//
// # Leases and sessions
//
// A lease lives as long as the engine's ZooKeeper session. With
// Request.Renew it lasts until released: ZooKeeper has no per-node TTL, so
// a holder that crashes frees the key when its session expires, within the
// session timeout, not within Request.TTL. Without Renew the engine ends the
// lease with a local timer at Request.TTL: Done closes with
// engine.ErrLeaseLost and the node is deleted.
//
// After a disconnect the engine cannot know whether its leases still hold.
// If the session is back (same session id) before the session timeout has
// passed since the server was last heard from, the leases carry on.
// Otherwise they are lost, all at once, with engine.ErrLeaseLost: when the
// local timer runs out (the server may not even be up to say so), or when
// the server reports the session expired. Engine.Connected reports whether
// the engine has a live session. A waiting acquisition outlasts a dropped
// connection as the leases do: it lists its queue again once the session
// is back. Acquisitions under way when the session is lost fail, and later
// ones use the new session go-zookeeper opens. If a
// session the engine had given up on comes back after all, the nodes of its
// lost leases are deleted then.
//
// A release whose delete cannot complete (the connection is down) ends the
// lease with engine.ErrLeaseLost and returns an *engine.OpError: the delete
// may still happen, so the lease cannot be said to hold. Such nodes, and
// those of leases lost to the session timer, are deleted when the same
// session is back; if it expires instead, the server has removed them.
//
// # Connections and credentials
//
// Dial makes and owns a connection; New takes a connection the caller made
// (see Conn) and never closes it. WithDigest puts a digest ACL on lock and
// queue nodes: clients without the credentials can read them but cannot
// delete a holder's node.
//
// go-zookeeper v1.0.4 has a data race whenever a session with watches
// comes back on a new TCP connection (the engine always keeps a watch):
// answers to requests sent before it has set the watches again write a
// field it is still reading. Dial's connection carries a guard that holds
// those answers back until the watches are set; for New, make the
// connection with zk.WithDialer(NewDialer()). The guard also cuts a
// connect request that gets no answer after a third of the session
// timeout, where go-zookeeper would wait ten receive timeouts (six and a
// half session timeouts): ZooKeeper 3.8.0 leaves a connection that comes
// in while it starts open and unanswered, and a session reconnecting to a
// restarted server would expire on it.
//
// # Errors
//
// Invalid requests fail before any I/O with engine.ErrInvalidKey,
// engine.ErrInvalidTTL or engine.ErrInvalidRequest. Server failures are
// *engine.OpError values. Connection and session failures, and calls that
// get no answer within the session timeout, wrap engine.ErrUnavailable; a
// refusal by a node's ACL (zk.ErrNoAuth, as for an engine without the
// digest credentials of WithDigest) or a failed authentication wraps
// engine.ErrAccessDenied and not engine.ErrUnavailable; other server errors
// wrap neither. Nothing is marked once the caller's context has ended: a
// waiting Acquire whose context ends returns
// errors.Join(engine.ErrNotAcquired, ctx.Err()).
package zookeeper

package zookeeper

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// go-zookeeper (v1.0.4, its newest release) has a data race on a session
// that comes back on a new TCP connection: its receive loop writes
// Conn.lastZxid from every answer to a request, and sendSetWatches, which
// it runs beside a fresh receive loop, reads it without a lock while it
// puts the connection's watches into SetWatches requests (go-zookeeper/zk
// pull request 35, unmerged). Nothing orders the two when an answer to a
// request sent before the SetWatches request comes back while the watches
// are being read; under -race that fails the program.
//
// The guard below sits on the TCP connections of one go-zookeeper
// connection and follows the protocol on them. On a connection that
// resumes a session with watches, it holds back every answer that would
// write lastZxid (a request's answer with a zxid above 0) until
// go-zookeeper writes its first SetWatches request, which it queues after
// its last read of lastZxid: that write, and the read that waits for it,
// order the read before the write. Answers without a zxid (to the
// credentials go-zookeeper sends again first) and notifications pass.
//
// Without watches go-zookeeper sends no SetWatches and reads nothing, so
// the guard must know whether a resumed session has any: it keeps the set
// of watches go-zookeeper's own map holds, by go-zookeeper's rules, from
// the watch requests it carries, their answers and the notifications. The
// map changes only as go-zookeeper's receive loop handles what the guard
// has handed it, and is emptied when the server answers a connect with no
// session.

// Wire protocol numbers (ZooKeeper's jute protocol, as go-zookeeper
// sends it).
const (
	opExists       = 3
	opGetData      = 4
	opGetChildren2 = 12
	opSetWatches   = 101

	codeNoNode = -101 // the error code of an answer for a missing node

	xidNotification = -1

	// maxFrame bounds one frame; ZooKeeper's own default (jute.maxbuffer)
	// is 1 MiB.
	maxFrame = 64 << 20
)

// The kinds of watch go-zookeeper keeps apart.
type watchKind uint8

const (
	watchData watchKind = iota
	watchExist
	watchChild
)

type watchKey struct {
	path string
	kind watchKind
}

// watchReq is a watch-setting request sent, waiting for its answer.
type watchReq struct {
	op   int32
	path string
}

// guard is what the TCP connections of one go-zookeeper connection share.
type guard struct {
	lastRead *atomic.Int64 // unix ns of the last byte from the server; may be nil

	mu      sync.Mutex
	watches map[watchKey]struct{} // as go-zookeeper's map of watchers
	broken  bool                  // a hold ran out: hold no more (see await)
}

func newGuard(lastRead *atomic.Int64) *guard {
	return &guard{lastRead: lastRead, watches: make(map[watchKey]struct{})}
}

// NewDialer returns a dialer for one go-zookeeper connection, to pass to
// zk.Connect with zk.WithDialer when the connection is meant for New. It
// keeps go-zookeeper v1.0.4 from a data race on every session that comes
// back on a new TCP connection while it has watches (the engine always
// has one), which fails a program built with -race, and it cuts a
// connect request that gets no answer after a third of the session
// timeout (see the package doc). Dial uses one of its own. Use each dialer
// for one zk.Connect only: it follows the watches of that connection.
func NewDialer() zk.Dialer {
	return newGuard(nil).dial
}

// dial opens a TCP connection for go-zookeeper, guarded.
func (g *guard) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &guardConn{Conn: c, g: g, pending: make(map[int32]watchReq),
		release: make(chan struct{}), closed: make(chan struct{})}, nil
}

// addWatch records the watch an answer to req with code sets.
func (g *guard) addWatch(req watchReq, code int32) {
	var k watchKind
	switch {
	case req.op == opGetData && code == 0:
		k = watchData
	case req.op == opGetChildren2 && code == 0:
		k = watchChild
	case req.op == opExists && code == 0:
		k = watchData
	case req.op == opExists && code == codeNoNode:
		k = watchExist
	default:
		return
	}
	g.mu.Lock()
	g.watches[watchKey{req.path, k}] = struct{}{}
	g.mu.Unlock()
}

// notified drops the watches a notification fires and reports whether
// any are left.
func (g *guard) notified(typ zk.EventType, path string) (left bool) {
	var kinds []watchKind
	switch typ {
	case zk.EventNodeCreated:
		kinds = []watchKind{watchExist}
	case zk.EventNodeDataChanged:
		kinds = []watchKind{watchExist, watchData}
	case zk.EventNodeChildrenChanged:
		kinds = []watchKind{watchChild}
	case zk.EventNodeDeleted:
		kinds = []watchKind{watchExist, watchData, watchChild}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range kinds {
		delete(g.watches, watchKey{path, k})
	}
	return len(g.watches) > 0
}

// connected notes the session a connect answer names and reports whether
// go-zookeeper will read lastZxid to set watches again on it.
func (g *guard) connected(session int64) (hold bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if session == 0 {
		clear(g.watches) // go-zookeeper drops them with the session
		return false
	}
	return len(g.watches) > 0 && !g.broken
}

// guardConn is one guarded TCP connection. go-zookeeper writes from its
// connect and send loops and reads from its connect and receive loops, one
// reader at a time: the read side needs no lock.
type guardConn struct {
	net.Conn
	g *guard

	mu       sync.Mutex
	wbuf     []byte             // the start of an outgoing frame
	greeted  bool               // the connect request, the first frame, was written
	pending  map[int32]watchReq // watch requests sent, by xid
	released bool               // a SetWatches request was written
	release  chan struct{}      // closed when released
	deadline time.Time          // of reads
	closing  sync.Once
	closed   chan struct{}

	rbuf     []byte // from the server, not yet a whole frame
	fbuf     []byte // the frame being read
	out      []byte // the rest of fbuf
	answered bool   // the connect answer was read
	hold     bool   // answers that write lastZxid wait for release
}

// Write passes p on after noting the requests it carries; go-zookeeper
// writes whole frames, but any split is followed.
func (c *guardConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	b := p
	if len(c.wbuf) > 0 {
		c.wbuf = append(c.wbuf, p...)
		b = c.wbuf
	}
	for len(b) >= 4 {
		n := int64(binary.BigEndian.Uint32(b))
		if int64(len(b)-4) < n {
			break
		}
		c.sent(b[4 : 4+n])
		b = b[4+n:]
	}
	c.wbuf = append(c.wbuf[:0], b...)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// sent notes one outgoing frame; c.mu is held.
func (c *guardConn) sent(f []byte) {
	if !c.greeted {
		c.greeted = true
		return // the connect request
	}
	if len(f) < 8 {
		return
	}
	xid, op := int32(binary.BigEndian.Uint32(f)), int32(binary.BigEndian.Uint32(f[4:]))
	switch op {
	case opSetWatches:
		if !c.released {
			c.released = true
			close(c.release)
		}
	case opExists, opGetData, opGetChildren2:
		// path (a length and bytes), then the watch flag.
		b := f[8:]
		if len(b) < 4 {
			return
		}
		n := int64(int32(binary.BigEndian.Uint32(b)))
		if n < 0 || int64(len(b)-4) < n+1 {
			return
		}
		if b[4+n] != 0 {
			c.pending[xid] = watchReq{op: op, path: string(b[4 : 4+n])}
		}
	}
}

// Read hands go-zookeeper the server's frames, after noting what each
// does to the watches and holding back, while it must, the answers that
// write lastZxid.
func (c *guardConn) Read(p []byte) (int, error) {
	if len(c.out) == 0 {
		f, err := c.frame()
		if err != nil {
			return 0, err
		}
		if err := c.pass(f[4:]); err != nil {
			return 0, err
		}
		c.out = f
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// frame reads until rbuf starts with a whole frame and returns a copy of
// it in fbuf, its length included.
func (c *guardConn) frame() ([]byte, error) {
	for {
		if len(c.rbuf) >= 4 {
			n := int64(binary.BigEndian.Uint32(c.rbuf))
			if n > maxFrame {
				return nil, fmt.Errorf("zookeeper: a frame of %d bytes from the server", n)
			}
			if int64(len(c.rbuf)-4) >= n {
				c.fbuf = append(c.fbuf[:0], c.rbuf[:4+n]...)
				c.rbuf = c.rbuf[:copy(c.rbuf, c.rbuf[4+n:])]
				return c.fbuf, nil
			}
		}
		if cap(c.rbuf)-len(c.rbuf) < 4096 {
			c.rbuf = append(make([]byte, 0, 2*cap(c.rbuf)+8192), c.rbuf...)
		}
		n, err := c.Conn.Read(c.rbuf[len(c.rbuf):cap(c.rbuf)])
		if n > 0 {
			c.rbuf = c.rbuf[:len(c.rbuf)+n]
			if c.g.lastRead != nil {
				c.g.lastRead.Store(time.Now().UnixNano())
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

// pass notes what the frame with body b does, waiting first if it is an
// answer that must be held back.
func (c *guardConn) pass(b []byte) error {
	if !c.answered {
		// The connect answer: protocol version, timeout, session id.
		c.answered = true
		var session int64
		if len(b) >= 16 {
			session = int64(binary.BigEndian.Uint64(b[8:]))
		}
		c.hold = c.g.connected(session)
		return nil
	}
	if len(b) < 16 {
		return nil // go-zookeeper fails on it
	}
	xid := int32(binary.BigEndian.Uint32(b))
	zxid := int64(binary.BigEndian.Uint64(b[4:]))
	code := int32(binary.BigEndian.Uint32(b[12:]))
	if c.hold && xid >= 0 && zxid > 0 {
		if err := c.await(); err != nil {
			return err
		}
		c.hold = false
	}
	switch {
	case xid == xidNotification:
		typ, path, ok := notification(b[16:])
		if ok && !c.g.notified(typ, path) {
			// No watch is left: go-zookeeper has read lastZxid under
			// the lock it takes to handle this, or will find none.
			c.hold = false
		}
	case xid >= 0:
		c.mu.Lock()
		req, ok := c.pending[xid]
		delete(c.pending, xid)
		c.mu.Unlock()
		if ok {
			c.g.addWatch(req, code)
		}
	}
	return nil
}

// await waits for the SetWatches request, until the read deadline. A hold
// that runs out means the guard's watches differ from go-zookeeper's (no
// SetWatches is coming): the guard stops holding on this connection's
// go-zookeeper connection rather than cost it every reconnect.
func (c *guardConn) await() error {
	c.mu.Lock()
	deadline := c.deadline
	c.mu.Unlock()
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-c.release:
		return nil
	case <-c.closed:
		return net.ErrClosed
	case <-expired:
		c.g.mu.Lock()
		c.g.broken = true
		c.g.mu.Unlock()
		return os.ErrDeadlineExceeded
	}
}

// notification decodes a watch notification's type and path.
func notification(b []byte) (zk.EventType, string, bool) {
	if len(b) < 12 {
		return 0, "", false
	}
	typ := zk.EventType(int32(binary.BigEndian.Uint32(b)))
	n := int64(int32(binary.BigEndian.Uint32(b[8:])))
	if n < 0 || int64(len(b)-12) < n {
		return 0, "", false
	}
	return typ, string(b[12 : 12+n]), true
}

// SetReadDeadline notes the deadline a held answer waits up to. For the
// connect answer it waits no longer than a third of the session timeout
// (see connectDeadline).
func (c *guardConn) SetReadDeadline(t time.Time) error {
	t = c.connectDeadline(t)
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// connectDeadline shortens the deadline go-zookeeper sets for the answer
// to its connect request, ten receive timeouts (10 x 2/3 of the session
// timeout) from now, to a third of the session timeout. ZooKeeper 3.8.0
// (Debian's) binds its port a moment before it has loaded its data on
// every start, and leaves a connection that comes in that moment open and
// unanswered; go-zookeeper would wait on it for six and a half session
// timeouts and the session would expire, so that a server's restart cost
// every lease of the engine. Cut at a third, go-zookeeper tries again (a
// second later when it has tried every server) while the session lives. A
// server that needs longer than that to answer a connect is not one a
// session of that timeout can be kept on. It reads go-zookeeper's reader
// state only while the connect answer is unread, when go-zookeeper's
// connecting goroutine is the only reader.
func (c *guardConn) connectDeadline(t time.Time) time.Time {
	if c.answered || t.IsZero() {
		return t
	}
	if d := time.Until(t); d > 0 {
		return time.Now().Add(d / 20)
	}
	return t
}

// SetDeadline is SetReadDeadline and SetWriteDeadline.
func (c *guardConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// Close ends a held read too.
func (c *guardConn) Close() error {
	c.closing.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

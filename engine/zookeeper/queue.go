package zookeeper

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
)

// Queue node names. Every acquisition creates one ephemeral sequential node
// under the key's lock node, named
//
//	_c_<32 hex digits of GUID>-write-<10-digit sequence>          (exclusive)
//	_c_<32 hex digits of GUID>-read-<10-digit sequence>           (shared)
//	_c_<32 hex digits of GUID>-limit<N>-read-<10-digit sequence>  (counted shared, Limit N)
//
// The "_c_<GUID>-" prefix is ZooKeeper's protected mode (as in Curator and
// go-zookeeper): a create whose reply was lost to a connection drop is found
// again by its GUID instead of being made twice. The sequence number, which
// the server appends, orders the queue. A counted node keeps the "-read-"
// before its sequence, so an engine that knows no limits still sees it as
// a reader and never grants a writer beside it. The node's data is
// Request.Value.
const (
	protectedPrefix = "_c_"
	writeKind       = "write-"
	readKind        = "read-"
	limitTag        = "-limit"
	seqDigits       = 10
)

// kindOf returns the kind part of a queue node name for req.
func kindOf(req engine.Request) string {
	switch {
	case req.Mode != engine.Shared:
		return writeKind
	case req.Limit > 0:
		return limitTag[1:] + strconv.Itoa(req.Limit) + "-" + readKind
	}
	return readKind
}

// qnode is one parsed queue node.
type qnode struct {
	name  string
	seq   int64
	write bool
	limit int // a counted reader's Limit; 0 for others
}

// parseNode parses a queue node name; names of any other shape are not part
// of the queue.
func parseNode(name string) (qnode, bool) {
	if len(name) <= seqDigits || !strings.HasPrefix(name, protectedPrefix) {
		return qnode{}, false
	}
	seq, err := strconv.ParseInt(name[len(name)-seqDigits:], 10, 64)
	if err != nil || seq < 0 {
		return qnode{}, false
	}
	rest := name[:len(name)-seqDigits]
	switch {
	case strings.HasSuffix(rest, "-"+writeKind):
		return qnode{name: name, seq: seq, write: true}, true
	case strings.HasSuffix(rest, "-"+readKind):
		rest = strings.TrimSuffix(rest, "-"+readKind)
		i := strings.LastIndex(rest, limitTag)
		if i < 0 {
			return qnode{name: name, seq: seq}, true
		}
		limit, err := strconv.Atoi(rest[i+len(limitTag):])
		if err != nil || limit <= 0 || limit > engine.MaxLimit {
			return qnode{}, false
		}
		return qnode{name: name, seq: seq, limit: limit}, true
	}
	return qnode{}, false
}

// wait is what a queued request waits for, as one listing of the queue
// shows it.
type wait struct {
	block   string // the node to watch; "" when granted or when counted
	ahead   int    // how many nodes ahead block the request by their mode
	before  int    // how many queue nodes are ahead of the request's own
	between int    // how many of those come after block
	counted bool   // held back by the count alone, with no node just ahead that is: watch the children
	poke    bool   // the next node is a counted reader, which may watch this one (see queued.poke)
}

// granted reports whether nothing ahead holds the request back.
func (w wait) granted() bool { return w.block == "" && !w.counted }

// blocker decides what the request whose node is own waits for, given the
// children of the key's lock node: a writer waits for the next lower node of
// either kind; a reader for the next lower writer; a counted reader (Limit
// N) also until fewer than N nodes are ahead of it, all readers then and
// all holding (or waiting on the count themselves). Later nodes never
// count, so the queue is fair (FIFO) and a reader behind a writer does not
// wait for writers that came after it.
//
// A counted reader held back by the count alone watches the node just
// ahead of it when that node is held back by the count too (it will poke
// its successor when granted, or go); otherwise every node ahead holds and
// any of them may leave, so it watches the children (w.counted). found is
// false if own is not among children.
func blocker(children []string, own string) (w wait, found bool) {
	me, ok := parseNode(own)
	if !ok {
		return wait{}, false
	}
	var block, pred, next qnode
	block.seq, pred.seq, next.seq = -1, -1, -1
	for _, c := range children {
		if c == own {
			found = true
			continue
		}
		n, ok := parseNode(c)
		if !ok {
			continue
		}
		if n.seq > me.seq {
			if next.seq < 0 || n.seq < next.seq {
				next = n
			}
			continue
		}
		w.before++
		if n.seq > pred.seq {
			pred = n
		}
		if me.write || n.write {
			w.ahead++
			if n.seq > block.seq {
				block = n
			}
		}
	}
	if !found {
		return wait{}, false
	}
	w.poke = next.seq >= 0 && !next.write && next.limit > 0
	if w.ahead > 0 {
		w.block = block.name
		if !me.write {
			for _, c := range children {
				if n, ok := parseNode(c); ok && n.seq > block.seq && n.seq < me.seq {
					w.between++
				}
			}
		}
		return w, true
	}
	if me.limit > 0 && w.before >= me.limit {
		// Only readers are ahead; pred is the nearest, w.before-1 ahead of it.
		if pred.limit > 0 && w.before-1 >= pred.limit {
			w.block = pred.name
		} else {
			w.counted = true
		}
	}
	return w, true
}

// fits reports whether n nodes ahead leave room for a request of limit
// (0: no limit).
func fits(n, limit int) bool { return limit == 0 || n < limit }

// holding returns the queue nodes among children that hold the key, in
// queue order, by the grant rule of blocker: a leading writer alone, or
// the readers before the first writer, a counted one only within its
// Limit.
func holding(children []string) []qnode {
	nodes := make([]qnode, 0, len(children))
	for _, c := range children {
		if n, ok := parseNode(c); ok {
			nodes = append(nodes, n)
		}
	}
	slices.SortFunc(nodes, func(a, b qnode) int { return cmp.Compare(a.seq, b.seq) })
	var out []qnode
	for i, n := range nodes {
		if n.write {
			if i == 0 {
				out = append(out, n)
			}
			break
		}
		if fits(i, n.limit) {
			out = append(out, n)
		}
	}
	return out
}

// isWriter reports whether name is an exclusive queue node.
func isWriter(name string) bool {
	n, ok := parseNode(name)
	return ok && n.write
}

// newGUID returns 32 random hex digits.
func newGUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// guidOf returns the GUID in a protected node name, or "".
func guidOf(name string) string {
	if !strings.HasPrefix(name, protectedPrefix) || len(name) < len(protectedPrefix)+32 {
		return ""
	}
	return name[len(protectedPrefix) : len(protectedPrefix)+32]
}

package zookeeper

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
)

// Queue node names. Every acquisition creates one ephemeral sequential node
// under the key's lock node, named
//
//	_c_<32 hex digits of GUID>-write-<10-digit sequence>   (exclusive)
//	_c_<32 hex digits of GUID>-read-<10-digit sequence>    (shared)
//
// The "_c_<GUID>-" prefix is ZooKeeper's protected mode (as in Curator and
// go-zookeeper): a create whose reply was lost to a connection drop is found
// again by its GUID instead of being made twice. The sequence number, which
// the server appends, orders the queue.
const (
	protectedPrefix = "_c_"
	writeKind       = "write-"
	readKind        = "read-"
	seqDigits       = 10
)

// qnode is one parsed queue node.
type qnode struct {
	name  string
	seq   int64
	write bool
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
		return qnode{name, seq, true}, true
	case strings.HasSuffix(rest, "-"+readKind):
		return qnode{name, seq, false}, true
	}
	return qnode{}, false
}

// blocker returns the node a request in mode must wait for, given the
// children of the key's lock node and the name of its own node: for a
// writer, the next lower node of either kind; for a reader, the next lower
// writer. Later nodes never count, so the queue is fair (FIFO) and a reader
// behind a writer does not wait for writers that came after it. ahead is
// how many lower nodes block the request (block is the highest of them).
// found is false if own is not among children.
func blocker(children []string, own string,
	mode engine.Mode) (block string, ahead int, found bool) {
	me, ok := parseNode(own)
	if !ok {
		return "", 0, false
	}
	best := int64(-1)
	for _, c := range children {
		if c == own {
			found = true
			continue
		}
		n, ok := parseNode(c)
		if !ok || n.seq >= me.seq || (mode == engine.Shared && !n.write) {
			continue
		}
		ahead++
		if n.seq > best {
			best, block = n.seq, c
		}
	}
	return block, ahead, found
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

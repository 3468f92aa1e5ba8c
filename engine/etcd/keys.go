package etcd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type kvPair = mvccpb.KeyValue

// Queue entries. Every acquisition puts one key, attached to the engine's
// etcd lease, under its lock key's queue range:
//
//	<prefix><lock key>\x00<etcd lease id, 16 hex digits>/<slot, hex>/<w|r><limit>
//
// A lock key holds no control character (engine.CheckKey), so the NUL
// after it ends the key: no key's queue range contains another's, even
// when one key is a prefix of another. The lease id and a slot number
// (held by one acquisition of the engine at a time, reused after) make the
// name unique among live entries; deletes compare the entry's create
// revision, so they are compare-and-deletes on ownership. The mode letter
// and the limit
// (0 for none) say how the entry waits; the entry's value is Request.Value.
// Queue order is the entries' create revisions.
const sep = "\x00"

// queueRange returns the prefix of key's queue entries.
func (e *Engine) queueRange(key string) string { return e.prefix + key + sep }

// entryName returns the name of a new queue entry.
func entryName(queue string, lease clientv3.LeaseID, seq uint64, mode engine.Mode, limit int) string {
	m := 'w'
	if mode == engine.Shared {
		m = 'r'
	}
	return fmt.Sprintf("%s%016x/%x/%c%d", queue, uint64(lease), seq, m, limit)
}

// entry is one parsed queue entry.
type entry struct {
	name  string
	rev   int64 // create revision: queue order and the token
	write bool
	limit int
	value string
}

// parseEntry parses a queue entry; names of another shape are not part of
// the queue.
func parseEntry(queue string, name string, rev int64, value []byte) (entry, bool) {
	rest, ok := strings.CutPrefix(name, queue)
	if !ok {
		return entry{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || len(parts[2]) < 2 {
		return entry{}, false
	}
	limit, err := strconv.Atoi(parts[2][1:])
	if err != nil || limit < 0 {
		return entry{}, false
	}
	switch parts[2][0] {
	case 'w':
		return entry{name: name, rev: rev, write: true, value: string(value)}, true
	case 'r':
		return entry{name: name, rev: rev, limit: limit, value: string(value)}, true
	}
	return entry{}, false
}

// parseQueue parses a listing sorted by create revision.
func parseQueue(queue string, kvs []*kvPair) []entry {
	out := make([]entry, 0, len(kvs))
	for _, kv := range kvs {
		if en, ok := parseEntry(queue, string(kv.Key), kv.CreateRevision, kv.Value); ok {
			out = append(out, en)
		}
	}
	return out
}

// wait says what a queued request waits for.
type wait struct {
	granted bool
	block   string // the one entry to watch; "" when counted
	ahead   int    // how many entries ahead block the request
	counted bool   // blocked by the count of shared holders: watch the range
}

// blocker decides whether the entry with create revision own is granted,
// given the queue in create-revision order: an exclusive entry waits for
// the next lower entry of either mode; a shared one for the next lower
// exclusive entry only, and a counted shared one also until fewer than its
// limit entries are ahead of it (all of them shared then). Later entries
// never count, so the queue is fair (FIFO). found is false when own is not
// in the queue.
func blocker(queue []entry, own int64) (w wait, found bool) {
	var me entry
	idx := -1
	for i, en := range queue {
		if en.rev == own {
			me, idx = en, i
			break
		}
	}
	if idx < 0 {
		return wait{}, false
	}
	for _, en := range queue[:idx] {
		if me.write || en.write {
			w.ahead++
			w.block = en.name
		}
	}
	switch {
	case w.ahead > 0:
		return w, true
	case !me.write && me.limit > 0 && idx >= me.limit:
		return wait{counted: true, ahead: idx}, true
	}
	return wait{granted: true}, true
}

// holders returns the entries of a queue that hold the key: a leading
// exclusive entry alone, or the shared entries before the first exclusive
// one, a counted entry only within its limit.
func holders(queue []entry) []engine.Holder {
	var out []engine.Holder
	for i, en := range queue {
		if en.write {
			if i == 0 {
				out = append(out, engine.Holder{Mode: engine.Exclusive, Token: uint64(en.rev), Value: en.value})
			}
			break
		}
		if en.limit == 0 || i < en.limit {
			out = append(out, engine.Holder{Mode: engine.Shared, Token: uint64(en.rev), Value: en.value})
		}
	}
	return out
}

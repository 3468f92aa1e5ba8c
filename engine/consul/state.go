package consul

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/hashicorp/consul/api"
)

// holder is one entry of a lock document.
type holder struct {
	Lease   string `json:"lease"`
	Token   uint64 `json:"token,omitempty"` // the lease's token (see fenceOps)
	Owner   string `json:"owner,omitempty"`
	Session string `json:"session,omitempty"`
	Value   string `json:"value,omitempty"` // Request.Value, for Holders
}

// document is the value of P/E/lock. An exclusive holder writes Mode
// "exclusive" and itself in Holders while it holds the document with its
// session; shared holders list themselves in an unlocked document.
type document struct {
	Mode    string   `json:"mode"`
	Holders []holder `json:"holders"`
}

func (d document) encode() []byte {
	b, _ := json.Marshal(d)
	return b
}

// state is one consistent read of everything stored for a key.
type state struct {
	index      uint64      // X-Consul-Index of the read, for blocking queries
	doc        *api.KVPair // the lock document, nil if absent
	marker     *api.KVPair // P/E/queue, nil if absent
	fence      *api.KVPair // P/E/fence, the fencing counter, nil if absent
	parsed     document
	parsedOK   bool
	contenders map[string]bool   // lease ids with a contender key
	granted    map[string]uint64 // lease id -> ModifyIndex of its contender key
	waiters    []waiter          // live fair-mode waiters, unordered
}

// read lists P/E/. With index > 0 it is a blocking query that returns when
// something under P/E/ changes or after the engine's wait time.
func (e *Engine) read(ctx context.Context, dir string, index uint64) (*state, error) {
	limit := cleanupTimeout
	if index > 0 {
		limit += 2 * e.cfg.recheck
	}
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	q := e.query(rctx)
	if index > 0 {
		q.WaitIndex, q.WaitTime = index, e.cfg.recheck
	}
	pairs, meta, err := e.kv.List(dir, q)
	if err != nil {
		return nil, err
	}
	st := &state{index: meta.LastIndex, contenders: make(map[string]bool),
		granted: make(map[string]uint64)}
	for _, p := range pairs {
		rest, ok := strings.CutPrefix(p.Key, dir)
		if !ok {
			continue
		}
		switch {
		case rest == docName:
			st.doc = p
			st.parsedOK = json.Unmarshal(p.Value, &st.parsed) == nil
		case rest == queueName:
			st.marker = p
		case rest == fenceName:
			st.fence = p
		case strings.HasPrefix(rest, contenderHead) && p.Session != "":
			id := strings.TrimPrefix(rest, contenderHead)
			st.contenders[id] = true
			st.granted[id] = p.ModifyIndex
		case strings.HasPrefix(rest, waiterHead) && p.Session != "":
			if w, ok := parseWaiter(rest, p); ok {
				st.waiters = append(st.waiters, w)
			}
		}
	}
	return st, nil
}

// writerHeld reports whether an exclusive holder has the key.
func (st *state) writerHeld() bool { return st.doc != nil && st.doc.Session != "" }

// readers returns the shared holders of an unlocked document.
func (st *state) readers() []holder {
	if st.doc == nil || st.doc.Session != "" || !st.parsedOK {
		return nil
	}
	return st.parsed.Holders
}

// has reports whether the unlocked document lists lease id.
func (st *state) has(id string) bool {
	for _, h := range st.readers() {
		if h.Lease == id {
			return true
		}
	}
	return false
}

// dead returns the shared holders whose contender key is gone: their
// session was invalidated.
func (st *state) dead() []holder {
	var d []holder
	for _, h := range st.readers() {
		if !st.contenders[h.Lease] {
			d = append(d, h)
		}
	}
	return d
}

// prunable reports whether an unlocked document can be cut down: it lists
// dead holders, or it is not a document this engine wrote.
func (st *state) prunable() bool {
	if st.doc == nil || st.doc.Session != "" {
		return false
	}
	return !st.parsedOK || len(st.dead()) > 0 || len(st.parsed.Holders) == 0
}

// live counts the shared holders whose contender key is still held.
func (st *state) live() int {
	n := 0
	for _, h := range st.readers() {
		if st.contenders[h.Lease] {
			n++
		}
	}
	return n
}

// full reports whether a counted shared request with limit is refused by
// the holders st lists alive (dead ones are pruned by the grant).
func (st *state) full(limit int) bool { return limit > 0 && st.live() >= limit }

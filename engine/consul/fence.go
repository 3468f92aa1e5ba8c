package consul

import (
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// fenceName is the key's fencing counter, P/E/fence: the last token
// granted for the key, as a decimal string. It is kept when the lock is
// released, so that tokens keep increasing.
const fenceName = "fence"

// tokenEpoch is 2025-01-01T00:00:00Z in Unix seconds: the fencing clock
// counts from it.
const tokenEpoch = 1735689600

// tokenTick is the fencing clock's unit in microseconds, as on the Redis
// engine. A token is at most 48 bits (the Failover puts its epoch above
// them), and 2^48 ticks of 8µs last about 71 years from tokenEpoch, until
// about 2096; no key is granted 125,000 times a second, so the counter does
// not run ahead of the clock.
const tokenTick = 8

// clockTicks is t in tokenTick units since tokenEpoch (0 before it).
func clockTicks(t time.Time) uint64 {
	us := t.UnixMicro() - tokenEpoch*1_000_000
	if us < 0 {
		return 0
	}
	return uint64(us / tokenTick)
}

// fenceKey is the fencing counter of l's key.
func fenceKey(l *lease) string { return l.dir + fenceName }

// fenceOps returns the token of a grant that last saw the key's counter
// as fence (nil: absent), max(counter + 1, clock) with the clock read now,
// and the operations that store it in the grant's transaction: a check
// that the counter is still fence (its ModifyIndex, or its absence), and
// the write. Any grant in between changes the counter, so the check fails
// and the grant reads again: two grants never get the same token. A
// counter the agent lost (a dev agent restarted, a wiped cluster, an older
// snapshot restored, the folder deleted) starts again from the clock,
// above every token granted before, provided the clock of the process that
// grants is not behind the clocks of those that granted before (see the
// package documentation, "Tokens").
func fenceOps(l *lease, fence *api.KVPair) (api.KVTxnOps, uint64) {
	key := fenceKey(l)
	check := &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: key}
	var last uint64
	if fence != nil {
		check = &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: fence.ModifyIndex}
		// An unreadable counter counts as 0: the clock is the floor.
		last, _ = strconv.ParseUint(string(fence.Value), 10, 64)
	}
	tok := max(last+1, clockTicks(time.Now()))
	set := &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: []byte(strconv.FormatUint(tok, 10))}
	return api.KVTxnOps{check, set}, tok
}

// maxFences bounds the counters a fenceCache remembers.
const maxFences = 1024

// fenceCache remembers, per key folder, the fencing counter as the
// engine's last grant of the key wrote it, so that the next exclusive
// attempt on the key need not read it first (see tryExclusive): an
// uncontended grant stays one transaction. A counter someone else changed
// since fails the grant's check, which drops the entry, and the next
// attempt reads. The cache holds at most maxFences keys; when full, a new
// key evicts an arbitrary one.
type fenceCache struct {
	mu sync.Mutex
	m  map[string]fenceEntry // key folder -> the counter as last written
}

// fenceEntry is a counter as a grant wrote it.
type fenceEntry struct{ token, index uint64 }

// get returns the counter remembered for l's key, or nil.
func (c *fenceCache) get(l *lease) *api.KVPair {
	c.mu.Lock()
	f, ok := c.m[l.dir]
	c.mu.Unlock()
	if !ok {
		return nil
	}
	return &api.KVPair{Key: fenceKey(l), ModifyIndex: f.index, Value: []byte(strconv.FormatUint(f.token, 10))}
}

// put remembers the counter a grant of l wrote: tok, at the transaction's
// index in resp.
func (c *fenceCache) put(l *lease, resp *api.KVTxnResponse, tok uint64) {
	idx, err := indexOf(resp, fenceKey(l))
	if err != nil {
		c.drop(l.dir)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]fenceEntry)
	}
	if _, ok := c.m[l.dir]; !ok && len(c.m) >= maxFences {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[l.dir] = fenceEntry{token: tok, index: idx}
}

// drop forgets the counter of dir.
func (c *fenceCache) drop(dir string) {
	c.mu.Lock()
	delete(c.m, dir)
	c.mu.Unlock()
}

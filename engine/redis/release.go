package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
)

// ReleaseMarkTTL is how long a force release's mark (the key's :o set of
// the lease ids it freed) lives: a holder whose renewal, or Release, finds
// its lease gone within that time is told engine.ErrReleasedByOperator;
// one that was paused longer is told engine.ErrLeaseLost.
const ReleaseMarkTTL = time.Hour

var (
	_ engine.Releaser = (*Engine)(nil)
	_ engine.Releaser = (*Redlock)(nil)
)

// forceRelease: KEYS w r ww q f h rw x wt v cq o; ARGV "" channel
// wake_prefix "" mark_ttl_ms. In one script it reads the holders as
// holdersScript does, adds their lease ids to the mark O (with
// mark_ttl_ms to live), deletes the writer, the readers and their values,
// and serves the waiters (luaHandOff: a waiting writer is granted the key
// with a new token, waiting readers are woken, watchers told). It returns
// the holders as flat triples mode, token, value; nothing for a free key,
// which it leaves alone.
var forceRelease = goredis.NewScript(luaEffects + luaNow + `
local W, R, WW, Q, F, H, RW, X, WT = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local V, O = KEYS[10], KEYS[12]
local CHAN, WAKE = ARGV[2], ARGV[3]
local out, ids = {}, {}
local w = redis.call('GET', W)
if w then
  local val = ''
  local x = redis.call('GET', X)
  if x and string.sub(x, 1, #w + 1) == w .. ' ' then val = string.sub(x, #w + 2) end
  out[#out + 1] = 'x'
  out[#out + 1] = redis.call('GET', F) or '0'
  out[#out + 1] = val
  ids[#ids + 1] = w
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', R, '(' .. now, '+inf')) do
  local info = redis.call('HGET', V, id)
  local tok, val = nil, nil
  if info then tok, val = string.match(info, '^(%d+) ?(.*)$') end
  if tok then
    out[#out + 1] = 's'
    out[#out + 1] = tok
    out[#out + 1] = val
  end
  ids[#ids + 1] = id
end
if #ids == 0 then return out end
redis.call('SADD', O, unpack(ids))
redis.call('PEXPIRE', O, ARGV[5])
redis.call('DEL', W, X, R, V)
redis.call('HDEL', H, unpack(ids))
` + luaHandOff + `
return out
`)

// ForceRelease frees key whoever holds it; see engine.Releaser. One script
// deletes its writer and readers, serves its waiters as a release does (a
// waiting writer is handed the key with a higher token, waiting readers
// and watchers are woken), and records the freed lease ids in the key's
// mark for ReleaseMarkTTL. A holder in any process learns it from its
// next renewal, which finds its lease gone and the mark naming it (after a
// SIGSTOP too, when it resumes); its Release then returns
// engine.ErrNotHeld. It returns engine.ErrClosed after Close.
func (e *Engine) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	k := e.keysOf(key)
	keys := []string{k.w, k.r, k.ww, k.q, k.f, k.h, k.rw, k.x, k.wt, k.v, k.cq, e.markKey(key)}
	rctx, cancel := e.roundTrip(ctx)
	defer cancel()
	v, err := forceRelease.Run(rctx, e.c, keys, "", k.c, e.wakePrefix(), "", ms(ReleaseMarkTTL)).Slice()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, e.opError(ctx, "force release", key, err)
	}
	hs, err := parseHolders(v)
	if err != nil {
		return nil, e.opError(ctx, "force release", key, err)
	}
	if len(hs) == 0 {
		return nil, fmt.Errorf("%w: %q is free", engine.ErrNotHeld, key)
	}
	return hs, nil
}

// markKey is the name of key's force-release mark, in the key's slot.
func (e *Engine) markKey(key string) string { return e.opts.prefix + tagOf(key) + ":o" }

// parseHolders reads the flat triples mode, token, value of the holders
// and force-release scripts, in grant order.
func parseHolders(v []any) ([]engine.Holder, error) {
	if len(v)%3 != 0 {
		return nil, fmt.Errorf("script returned %d values", len(v))
	}
	hs := make([]engine.Holder, 0, len(v)/3)
	for i := 0; i < len(v); i += 3 {
		kind, _ := v[i].(string)
		tok, _ := v[i+1].(string)
		val, _ := v[i+2].(string)
		t, err := strconv.ParseUint(tok, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("script returned token %q", tok)
		}
		m := engine.Shared
		if kind == "x" {
			m = engine.Exclusive
		}
		hs = append(hs, engine.Holder{Mode: m, Token: t, Value: val})
	}
	slices.SortFunc(hs, func(a, b engine.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return hs, nil
}

// releaseMarkWait bounds the round trip that asks whether lost leases
// were freed by an operator: their Done waits for it.
const releaseMarkWait = 500 * time.Millisecond

// endLost ends leases that a renewal found gone (the server no longer
// has them), or could not renew before the server's own expiry (the
// process was paused): each is told engine.ErrReleasedByOperator
// when the key's force-release mark names it (one pipeline for all of
// them, bounded by releaseMarkWait), and cause otherwise.
func (e *Engine) endLost(ls []*lease, causes []error) {
	if len(ls) == 0 {
		return
	}
	marked := e.marked(ls)
	for i, l := range ls {
		cause := causes[i]
		if marked[i] {
			cause = fmt.Errorf("%w: its renewal found %q freed", engine.ErrReleasedByOperator, l.Key())
		}
		l.lost(cause)
	}
}

// marked reports, for each of ls, whether its key's force-release mark
// names it; false for all when the server does not answer in time.
func (e *Engine) marked(ls []*lease) []bool {
	out := make([]bool, len(ls))
	ctx, cancel := context.WithTimeout(context.Background(), min(e.opts.timeout, releaseMarkWait))
	defer cancel()
	pipe := e.c.Pipeline()
	cmds := make([]*goredis.BoolCmd, len(ls))
	for i, l := range ls {
		cmds[i] = pipe.SIsMember(ctx, e.markKey(l.Key()), l.id)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out
}

// ForceRelease frees key on every node at once (Engine.ForceRelease on
// each); see engine.Releaser. A quorum of nodes must answer. It returns
// the holders freed on any node (see mergeFreed); a key no node held is
// engine.ErrNotHeld. The holder's node leases learn it from their
// renewals, and the first to be told ends the Redlock lease with
// engine.ErrReleasedByOperator, without taking any node again.
func (r *Redlock) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, r.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if r.frame.Closed() {
		return nil, engine.ErrClosed
	}
	freed := make([][]engine.Holder, len(r.nodes))
	errs := r.each(func(i int) error {
		nctx, cancel := context.WithTimeout(ctx, r.opts.nodeWait(0)*4)
		defer cancel()
		var err error
		freed[i], err = r.nodes[i].ForceRelease(nctx, key)
		if errors.Is(err, engine.ErrNotHeld) {
			return nil
		}
		return err
	})
	if ok := countNil(errs); ok < r.quorum {
		return nil, r.quorumErr(ctx, "force release", key,
			fmt.Sprintf("%d of %d nodes answered, %d needed", ok, len(r.nodes), r.quorum), errs)
	}
	hs := mergeFreed(freed)
	if len(hs) == 0 {
		return nil, fmt.Errorf("%w: %q is free on every node", engine.ErrNotHeld, key)
	}
	return hs, nil
}

// mergeFreed merges what each node freed into the Redlock leases freed.
// Nodes share no lease id, so a lease is known by its mode and value, and
// the k-th holder with one mode and value on a node (in token order) is
// taken for the k-th on every other; its token is the largest any node
// reports for it, as the grant's was.
func mergeFreed(freed [][]engine.Holder) []engine.Holder {
	type id struct {
		mode  engine.Mode
		value string
	}
	toks := make(map[id][]uint64)
	for _, hs := range freed {
		seen := make(map[id]int)
		for _, h := range hs {
			k := id{h.Mode, h.Value}
			if n := seen[k]; n < len(toks[k]) {
				toks[k][n] = max(toks[k][n], h.Token)
			} else {
				toks[k] = append(toks[k], h.Token)
			}
			seen[k]++
		}
	}
	var out []engine.Holder
	for k, ts := range toks {
		for _, t := range ts {
			out = append(out, engine.Holder{Mode: k.mode, Token: t, Value: k.value})
		}
	}
	slices.SortFunc(out, func(a, b engine.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return out
}

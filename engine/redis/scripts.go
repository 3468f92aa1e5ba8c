package redis

import goredis "github.com/redis/go-redis/v9"

// tokenEpoch is 2025-01-01T00:00:00Z in Unix seconds: the fencing clock
// counts from it.
const tokenEpoch = 1735689600

// tokenTick is the fencing clock's unit in microseconds. A token is at most
// 48 bits (failover.Manager puts its epoch above them), and 2^48 ticks of 8µs
// last about 71 years from tokenEpoch, until about 2096; no key is granted
// 125,000 times a second, so the counter does not run ahead of the clock.
const tokenTick = 8

// luaEffects makes Redis 3.2 to 4.x replicate a script's writes rather
// than the script itself, which the scripts that read TIME before they
// write need; from Redis 5 on that is the default and the call does
// nothing.
const luaEffects = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
`

// luaFence sets the local tok to the next fencing token of the counter
// key F: max(counter + 1, clock), where clock is the server's TIME in
// tokenTick units since tokenEpoch (the literals below), and stores it in
// the counter. So a counter the server has lost (a restart without
// persistence, a crash that lost recent writes, a flush, an eviction, a
// promoted replica that lacked the last grants) starts again above every
// token granted before, provided the server's clock is not behind the
// clock of the server that made those grants. The counter is written as
// an integer string (string.format), never in a Lua number's exponent
// form.
const luaFence = `
local tok = redis.call('INCR', F)
local ft = redis.call('TIME')
local fc = math.floor(((tonumber(ft[1]) - 1735689600) * 1000000 + tonumber(ft[2])) / 8)
if tok < fc then
  tok = fc
  redis.call('SET', F, string.format('%d', fc))
end
`

// luaNow is the server's clock: t as TIME returned it, now in
// milliseconds.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaPrune drops the waiting writers whose places ran out (a crashed
// waiter stops refreshing its place) from WW and their registrations from
// H. It expects now.
const luaPrune = `
local gone = redis.call('ZRANGEBYSCORE', WW, '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', WW, '-inf', now)
  redis.call('HDEL', H, unpack(gone))
end
`

// luaNext sets nextw to the waiting writer a release should serve: the live
// head of the queue when writers queue in arrival order (fair mode, or a
// default-mode lock in its starvation mode), otherwise the live waiter that
// has gone longest without trying (the waiting set is scored by refresh
// deadline). It expects now, a local nextw, and WW, Q and H.
const luaNext = luaPrune + `
while true do
  local head = redis.call('LINDEX', Q, 0)
  if not head then break end
  if redis.call('ZSCORE', WW, head) then nextw = head; break end
  redis.call('LPOP', Q)
end
if not nextw then nextw = redis.call('ZRANGE', WW, 0, 0)[1] end
`

// luaHandOff serves the waiters of a key that has just become free (W
// absent). It expects W R WW Q F H RW X WT, CHAN and WAKE. When a writer waits
// and no live reader holds the key, the release grants the key to it
// itself (hand-off): it sets W to the waiter's lease id with the TTL the
// waiter registered, takes a fencing token, and publishes on the waiter's
// engine's wake channel "<id> <token> <d> <attempt>", where d is the time
// in microseconds, by the server's clock, from the waiter's registration
// by its attempt number <attempt> to this grant; the same "G <token> <d>
// <attempt>" is kept in H for the waiter to read if the message is lost.
// When the waiter registered nothing (an older client) or readers still
// hold the key, the message is the bare id: the waiter tries again. With
// no writer waiting, "*" on CHAN wakes the waiting readers, if any: a
// release nobody waits for publishes nothing. A waiter's registration may
// end in its Request.Value, which the hand-off stores in X. Last, when
// nothing was said on CHAN and someone watches the key (WT), "w" there
// tells the watchers (luaTell).
const luaHandOff = luaNow + `
local told = false
local nextw = nil
if redis.call('EXISTS', WW) == 1 then
` + luaNext + `
end
if nextw then
  local ch = WAKE .. string.match(nextw, '^[^:]*')
  local reg = redis.call('HGET', H, nextw)
  local s, us, ttl, a, val = nil, nil, nil, nil, nil
  if reg then s, us, ttl, a, val = string.match(reg, '^(%d+) (%d+) (%d+) (%d+) ?(.*)$') end
  if s and redis.call('ZCOUNT', R, '(' .. now, '+inf') == 0 then
    local d = (tonumber(t[1]) - tonumber(s)) * 1000000 + tonumber(t[2]) - tonumber(us)
    if d < 0 then d = 0 end
` + luaFence + `
    redis.call('SET', W, nextw, 'PX', ttl)
    if val ~= '' then redis.call('SET', X, nextw .. ' ' .. val, 'PX', ttl) end
    redis.call('ZREM', WW, nextw)
    redis.call('LREM', Q, 0, nextw)
    local g = string.format('%d %d %s', tok, d, a)
    redis.call('HSET', H, nextw, 'G ' .. g)
    redis.call('PUBLISH', ch, nextw .. ' ' .. g)
  else
    redis.call('PUBLISH', ch, nextw)
  end
elseif redis.call('ZCOUNT', RW, '(' .. now, '+inf') > 0 then
  redis.call('PUBLISH', CHAN, '*')
  told = true
end
if not told then
` + luaTell + `
end
`

// luaTell tells the key's watchers, if any (a live WT mark), that its
// holders changed: "w" on CHAN, which wakes watchers and no waiter. It
// expects WT and CHAN.
const luaTell = `
if redis.call('EXISTS', WT) == 1 then redis.call('PUBLISH', CHAN, 'w') end
`

// acquireExclusive: KEYS w r ww q f h x wt; ARGV id ttl_ms fair wait
// queue_ttl_ms queued starving attempt value channel. Returns {1, token} on a grant,
// {2, token, d, attempt} when a release has already handed the key to this
// waiter (see luaHandOff), {0, pttl of the holder} otherwise.
//
// The first branch is the uncontended fast path: no holder, no reader and
// no queue; then only a writer that queued before (queued=1) has a place
// in the waiting set to give up. While the queue :q is not empty, the key
// goes to its head alone and every refused waiter joins it. Writers join
// it in fair mode, and in the default mode once one of them has waited
// past the engine's starvation threshold (starving=1): as in Go's
// sync.Mutex, the lock then works in arrival order until the queue drains.
// The writer that starts a queue brings every other waiting writer into it
// behind itself (oldest refresh first): a waiter sleeping outside the queue
// would otherwise be served by no release until the queue drains. A
// refused waiter registers in :h the server time of this attempt, its
// attempt number and its TTL (and its value, if any), for a release to
// hand the key to it. A grant stores the value, if any, in :x with the
// lease's TTL. A watched key (:wt exists) takes the second, slower path,
// whose grant tells the watchers (luaTell), so the fast path costs no
// command more than before for a key nobody watches.
var acquireExclusive = goredis.NewScript(luaEffects + `
local WT, CHAN, F = KEYS[8], ARGV[10], KEYS[5]
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[4], WT) == 0 then
  if ARGV[6] == '1' then
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('HDEL', KEYS[6], ARGV[1])
  end
` + luaFence + `
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if ARGV[9] ~= '' then redis.call('SET', KEYS[7], ARGV[1] .. ' ' .. ARGV[9], 'PX', ARGV[2]) end
  return {1, tok}
end
if ARGV[6] == '1' and redis.call('GET', KEYS[1]) == ARGV[1] then
  local g = redis.call('HGET', KEYS[6], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
  local tok, d, a = nil, nil, nil
  if g then tok, d, a = string.match(g, '^G (%d+) (%d+) (%d+)$') end
  if tok then return {2, tonumber(tok), tonumber(d), tonumber(a)} end
  return {2, tonumber(redis.call('GET', KEYS[5])), 0, 0}
end
` + luaNow + `
local WW, H = KEYS[3], KEYS[6]
` + luaPrune + `
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local head = nil
while true do
  head = redis.call('LINDEX', KEYS[4], 0)
  if not head or redis.call('ZSCORE', KEYS[3], head) then break end
  redis.call('LPOP', KEYS[4])
end
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[2]) == 0 and ((not head) or head == ARGV[1]) then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
  if head then redis.call('LREM', KEYS[4], 0, ARGV[1]) end
` + luaFence + `
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if ARGV[9] ~= '' then redis.call('SET', KEYS[7], ARGV[1] .. ' ' .. ARGV[9], 'PX', ARGV[2]) end
` + luaTell + `
  return {1, tok}
end
if ARGV[4] == '1' then
  local added = redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]), ARGV[1])
  if (ARGV[3] == '1' or ARGV[7] == '1' or head) and (added == 1 or not redis.call('LPOS', KEYS[4], ARGV[1])) then
    redis.call('LREM', KEYS[4], 0, ARGV[1])
    redis.call('RPUSH', KEYS[4], ARGV[1])
    if not head then
      for _, other in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
        if other ~= ARGV[1] then redis.call('RPUSH', KEYS[4], other) end
      end
    end
  end
  local reg = t[1] .. ' ' .. t[2] .. ' ' .. ARGV[2] .. ' ' .. ARGV[8]
  if ARGV[9] ~= '' then reg = reg .. ' ' .. ARGV[9] end
  redis.call('HSET', KEYS[6], ARGV[1], reg)
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
  redis.call('PEXPIRE', KEYS[4], ARGV[5])
  redis.call('PEXPIRE', KEYS[6], ARGV[5])
end
return {0, redis.call('PTTL', KEYS[1])}
`)

// acquireShared: KEYS w r ww f rw v cq wt; ARGV id ttl_ms wait
// queue_ttl_ms queued limit value channel. Readers stay out while a writer
// holds the key or waits for it; a refused reader that waits registers in
// :rw, so that a release knows whether to wake readers. Expired readers
// are pruned from :r and :v first.
//
// With a limit above 0 the request is counted: it is refused while limit
// unexpired readers hold the key, and counted waiters are served in
// arrival order: a waiting counted reader also takes a place at the end of
// the list :cq, and a request is granted only if it comes, among the live
// waiters of :cq (those with a live place in :rw; dead ones are dropped as
// they are met), before as many as there are free permits, or is not in
// :cq and fewer waiters than free permits are. A counted refusal returns
// the time until the earliest reader expires instead of the writer's
// PTTL. A grant stores "<token> <value>" in :v under the lease id, which
// Holders reads, and tells the key's watchers.
var acquireShared = goredis.NewScript(luaEffects + luaNow + `
local WT, CHAN, F = KEYS[8], ARGV[8], KEYS[4]
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  redis.call('HDEL', KEYS[6], unpack(gone))
end
local limit = tonumber(ARGV[6])
local refused = redis.call('EXISTS', KEYS[1]) == 1 or redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') > 0
local left = nil
if not refused and limit > 0 then
  local free = limit - redis.call('ZCARD', KEYS[2])
  refused = true
  if free > 0 then
    local ahead, i = 0, 0
    while true do
      local m = redis.call('LINDEX', KEYS[7], i)
      if not m or m == ARGV[1] then refused = false; break end
      local sc = redis.call('ZSCORE', KEYS[5], m)
      if sc and tonumber(sc) > now then
        ahead = ahead + 1
        if ahead >= free then break end
        i = i + 1
      else
        redis.call('LREM', KEYS[7], 1, m)
      end
    end
  end
  if refused then
    left = 0
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if first[2] then left = tonumber(first[2]) - now end
  end
end
if refused then
  if ARGV[3] == '1' then
    redis.call('ZADD', KEYS[5], now + tonumber(ARGV[4]), ARGV[1])
    redis.call('PEXPIRE', KEYS[5], ARGV[4])
    if limit > 0 then
      if not redis.call('LPOS', KEYS[7], ARGV[1]) then redis.call('RPUSH', KEYS[7], ARGV[1]) end
      redis.call('PEXPIRE', KEYS[7], ARGV[4])
    end
  end
  if left then return {0, left} end
  return {0, redis.call('PTTL', KEYS[1])}
end
if ARGV[5] == '1' then
  redis.call('ZREM', KEYS[5], ARGV[1])
  if limit > 0 then redis.call('LREM', KEYS[7], 0, ARGV[1]) end
end
` + luaFence + `
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[6], ARGV[1], string.format('%d', tok) .. ' ' .. ARGV[7])
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], top[2])
redis.call('PEXPIREAT', KEYS[6], top[2])
` + luaTell + `
return {1, tok}
`)

// The release and leave scripts take the same keys and arguments, KEYS w r
// ww q f h rw x wt, and for a reader's lease also v cq; ARGV id channel
// wake_prefix has_value. They set these names for luaHandOff.
const luaReleaseNames = `
  local W, R, WW, Q, F, H, RW, X, WT = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
  local CHAN, WAKE = ARGV[2], ARGV[3]
`

// releaseExclusive: compare-and-delete (and the value in :x, if the lease
// has one), then serve the waiters (luaHandOff) and tell the watchers, if
// any: one EXISTS when there are none.
var releaseExclusive = goredis.NewScript(luaEffects + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if ARGV[4] == '1' then redis.call('DEL', KEYS[8]) end
if redis.call('EXISTS', KEYS[3], KEYS[6], KEYS[7], KEYS[9]) > 0 then
` + luaReleaseNames + `
  redis.call('HDEL', H, ARGV[1])
` + luaHandOff + `
end
return 1
`)

// releaseShared: removes the reader from :r and :v, then serves the
// waiters (a writer once the last live reader leaves, waiting readers at
// any reader's release: a counted reader may wait for a permit) and tells
// the watchers.
var releaseShared = goredis.NewScript(luaEffects + `
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not s then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[10], ARGV[1])
local t0 = redis.call('TIME')
if tonumber(s) <= tonumber(t0[1]) * 1000 + math.floor(tonumber(t0[2]) / 1000) then return 0 end
if redis.call('EXISTS', KEYS[3], KEYS[7], KEYS[9]) > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
` + luaReleaseNames + `
` + luaHandOff + `
end
return 1
`)

// renewExclusive: KEYS w x; ARGV id ttl_ms has_value.
var renewExclusive = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] == '1' then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
  return 1
end
return 0
`)

// renewShared: KEYS r v; ARGV id ttl_ms.
var renewShared = goredis.NewScript(luaNow + `
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], top[2])
redis.call('PEXPIREAT', KEYS[2], top[2])
return 1
`)

// leaveQueue: a waiter that gives up leaves the writer set, the queue, its
// registration, the reader set and the counted queue; if it was a writer,
// or a counted reader, and the key is free of writers, the waiters it held
// back are served (luaHandOff).
var leaveQueue = goredis.NewScript(luaEffects + `
local gone = redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('LREM', KEYS[4], 0, ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
if KEYS[11] then gone = gone + redis.call('LREM', KEYS[11], 0, ARGV[1]) end
if gone > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
` + luaReleaseNames + `
` + luaHandOff + `
end
return gone
`)

// holdersScript: KEYS w r f x v. Returns the holders as flat triples
// mode, token, value: "x", the fencing counter and the value in :x (if it
// names the holder) for the exclusive holder, whose grant was the last to
// take a token; then "s", token and value from :v for every reader whose
// expiry (server time) is still ahead.
var holdersScript = goredis.NewScript(luaNow + `
local out = {}
local w = redis.call('GET', KEYS[1])
if w then
  local val = ''
  local x = redis.call('GET', KEYS[4])
  if x and string.sub(x, 1, #w + 1) == w .. ' ' then val = string.sub(x, #w + 2) end
  out[#out + 1] = 'x'
  out[#out + 1] = redis.call('GET', KEYS[3]) or '0'
  out[#out + 1] = val
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf')) do
  local info = redis.call('HGET', KEYS[5], id)
  if info then
    local tok, val = string.match(info, '^(%d+) ?(.*)$')
    if tok then
      out[#out + 1] = 's'
      out[#out + 1] = tok
      out[#out + 1] = val
    end
  end
end
return out
`)

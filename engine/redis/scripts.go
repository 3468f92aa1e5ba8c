package redis

import goredis "github.com/redis/go-redis/v9"

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
// absent). It expects W R WW Q F H RW, CHAN and WAKE. When a writer waits
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
// release nobody waits for publishes nothing.
const luaHandOff = luaNow + `
local nextw = nil
if redis.call('EXISTS', WW) == 1 then
` + luaNext + `
end
if nextw then
  local ch = WAKE .. string.match(nextw, '^[^:]*')
  local reg = redis.call('HGET', H, nextw)
  local s, us, ttl, a = nil, nil, nil, nil
  if reg then s, us, ttl, a = string.match(reg, '^(%d+) (%d+) (%d+) (%d+)$') end
  if s and redis.call('ZCOUNT', R, '(' .. now, '+inf') == 0 then
    local d = (tonumber(t[1]) - tonumber(s)) * 1000000 + tonumber(t[2]) - tonumber(us)
    if d < 0 then d = 0 end
    local tok = redis.call('INCR', F)
    redis.call('SET', W, nextw, 'PX', ttl)
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
end
`

// acquireExclusive: KEYS w r ww q f h; ARGV id ttl_ms fair wait
// queue_ttl_ms queued starving attempt. Returns {1, token} on a grant,
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
// attempt number and its TTL, for a release to hand the key to it.
var acquireExclusive = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[4]) == 0 then
  if ARGV[6] == '1' then
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('HDEL', KEYS[6], ARGV[1])
  end
  local token = redis.call('INCR', KEYS[5])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, token}
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
  local token = redis.call('INCR', KEYS[5])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, token}
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
  redis.call('HSET', KEYS[6], ARGV[1], t[1] .. ' ' .. t[2] .. ' ' .. ARGV[2] .. ' ' .. ARGV[8])
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
  redis.call('PEXPIRE', KEYS[4], ARGV[5])
  redis.call('PEXPIRE', KEYS[6], ARGV[5])
end
return {0, redis.call('PTTL', KEYS[1])}
`)

// acquireShared: KEYS w r ww f rw; ARGV id ttl_ms wait queue_ttl_ms
// queued. Readers stay out while a writer holds the key or waits for it;
// a refused reader that waits registers in :rw, so that a release knows
// whether to wake readers.
var acquireShared = goredis.NewScript(luaNow + `
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') > 0 then
  if ARGV[3] == '1' then
    redis.call('ZADD', KEYS[5], now + tonumber(ARGV[4]), ARGV[1])
    redis.call('PEXPIRE', KEYS[5], ARGV[4])
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if ARGV[5] == '1' then redis.call('ZREM', KEYS[5], ARGV[1]) end
local token = redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], top[2])
return {1, token}
`)

// releaseExclusive: KEYS w r ww q f h rw; ARGV id channel wake_prefix.
// Compare-and-delete, then serve the waiters (luaHandOff), if any.
var releaseExclusive = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[3], KEYS[6], KEYS[7]) > 0 then
  local W, R, WW, Q, F, H, RW, CHAN, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[2], ARGV[3]
  redis.call('HDEL', H, ARGV[1])
` + luaHandOff + `
end
return 1
`)

// releaseShared: KEYS w r ww q f h rw; ARGV id channel wake_prefix.
// Serves the waiters when the last live reader leaves, the only release a
// waiter can be waiting for.
var releaseShared = goredis.NewScript(`
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not s then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
local t0 = redis.call('TIME')
if tonumber(s) <= tonumber(t0[1]) * 1000 + math.floor(tonumber(t0[2]) / 1000) then return 0 end
if redis.call('EXISTS', KEYS[3], KEYS[7]) > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  local W, R, WW, Q, F, H, RW, CHAN, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[2], ARGV[3]
` + luaHandOff + `
end
return 1
`)

// renewExclusive: KEYS w; ARGV id ttl_ms.
var renewExclusive = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// renewShared: KEYS r; ARGV id ttl_ms.
var renewShared = goredis.NewScript(luaNow + `
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], top[2])
return 1
`)

// leaveQueue: KEYS w r ww q f h rw; ARGV id channel wake_prefix. A
// waiter that gives up leaves the writer set, the queue, its registration
// and the reader set; if it was a writer and the key is free, the waiters
// it held back are served (luaHandOff).
var leaveQueue = goredis.NewScript(`
local gone = redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('LREM', KEYS[4], 0, ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
if gone == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  local W, R, WW, Q, F, H, RW, CHAN, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[2], ARGV[3]
` + luaHandOff + `
end
return gone
`)

package redis

import goredis "github.com/redis/go-redis/v9"

// luaNow is the server's clock in milliseconds.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaNext sets nextw to the waiting writer a release should wake: the live
// head of the queue when writers queue in arrival order (fair mode, or a
// default-mode lock in its starvation mode), otherwise the live waiter that
// has gone longest without trying (the waiting set is scored by refresh
// deadline). It expects now, a local nextw, and the waiting set and queue
// as WW and Q.
const luaNext = `
redis.call('ZREMRANGEBYSCORE', WW, '-inf', now)
while true do
  local head = redis.call('LINDEX', Q, 0)
  if not head then break end
  if redis.call('ZSCORE', WW, head) then nextw = head; break end
  redis.call('LPOP', Q)
end
if not nextw then nextw = redis.call('ZRANGE', WW, 0, 0)[1] end
`

// luaWake wakes who should try next. A waiting writer is named on its own
// engine's wake channel (WAKE followed by the engine id that starts every
// lease id), so one release reaches one process; with no writer waiting,
// "*" on the key's channel wakes everyone (readers).
const luaWake = `
local nextw = nil
if redis.call('EXISTS', WW) == 1 then
` + luaNow + `
` + luaNext + `
end
if nextw then
  redis.call('PUBLISH', WAKE .. string.match(nextw, '^[^:]*'), nextw)
else
  redis.call('PUBLISH', CHAN, '*')
end
`

// acquireExclusive: KEYS w r ww q f; ARGV id ttl_ms fair wait queue_ttl_ms
// queued starving. Returns {1, token} on a grant, {0, pttl of the holder}
// otherwise.
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
// would otherwise be woken by no release until the queue drains.
var acquireExclusive = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[4]) == 0 then
  if ARGV[6] == '1' then redis.call('ZREM', KEYS[3], ARGV[1]) end
  local token = redis.call('INCR', KEYS[5])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, token}
end
` + luaNow + `
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local head = nil
while true do
  head = redis.call('LINDEX', KEYS[4], 0)
  if not head or redis.call('ZSCORE', KEYS[3], head) then break end
  redis.call('LPOP', KEYS[4])
end
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[2]) == 0 and ((not head) or head == ARGV[1]) then
  redis.call('ZREM', KEYS[3], ARGV[1])
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
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
  redis.call('PEXPIRE', KEYS[4], ARGV[5])
end
return {0, redis.call('PTTL', KEYS[1])}
`)

// acquireShared: KEYS w r ww f; ARGV id ttl_ms. Readers stay out while a
// writer holds the key or waits for it.
var acquireShared = goredis.NewScript(luaNow + `
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('ZCARD', KEYS[3]) > 0 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local token = redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], top[2])
return {1, token}
`)

// releaseExclusive: KEYS w ww q; ARGV id channel wake_prefix.
// Compare-and-delete, then wake the next waiter.
var releaseExclusive = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local WW, Q, CHAN, WAKE = KEYS[2], KEYS[3], ARGV[2], ARGV[3]
` + luaWake + `
return 1
`)

// releaseShared: KEYS r ww q; ARGV id channel wake_prefix. Wakes waiters
// when the last reader leaves, the only release a waiter can be waiting
// for.
var releaseShared = goredis.NewScript(luaNow + `
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
if tonumber(s) <= now then return 0 end
if redis.call('ZCARD', KEYS[1]) == 0 then
  local WW, Q, CHAN, WAKE = KEYS[2], KEYS[3], ARGV[2], ARGV[3]
` + luaWake + `
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

// leaveQueue: KEYS ww q w r; ARGV id channel wake_prefix. A waiter that
// gives up leaves the writer set and the queue; if the key is free, the
// next waiter (or every reader it held back) is woken.
var leaveQueue = goredis.NewScript(`
local gone = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('LREM', KEYS[2], 0, ARGV[1])
if gone == 1 and redis.call('EXISTS', KEYS[3]) == 0 then
  local WW, Q, CHAN, WAKE = KEYS[1], KEYS[2], ARGV[2], ARGV[3]
` + luaWake + `
end
return gone
`)

// Package redis is the cerberus engine for Redis, on go-redis v9: a single
// node, Sentinel or Cluster through one client interface.
//
// # Data
//
// A lock key K lives in up to five Redis keys that share one hash slot (a
// {tag} built from K), so every script works on Redis Cluster:
//
//	<prefix>{k:K}:w   the exclusive holder's lease id, with PX = lease TTL
//	<prefix>{k:K}:r   sorted set of shared holders, scored by expiry (server time)
//	<prefix>{k:K}:ww  sorted set of waiting writers, scored by a waiter deadline
//	<prefix>{k:K}:q   list: arrival order of waiting writers (fair mode only)
//	<prefix>{k:K}:f   the fencing counter (INCR); it is kept forever
//	<prefix>{k:K}:c   the pub/sub channel releases publish on
//
// Keys containing '}' use {h:<sha256 of K>} as the tag instead. Only the
// fencing counter outlives a lock: it must, so that tokens keep increasing
// after a key is released, expires or the client restarts.
//
// # Scripts
//
// Acquire, release and renew are each one Lua script, run with EVALSHA and
// falling back to EVAL after NOSCRIPT. Acquire increments the fencing
// counter and returns it as Token. Release and renew compare the stored
// lease id first: a stale lease changes nothing. Reader expiry uses the
// server's clock (TIME), never the client's.
//
// # Renewal
//
// Leases without a fixed TTL are renewed at a third of their TTL by one
// renewal loop per engine that pipelines every lease that is due (1000
// scripts a pipeline, up to four pipelines in flight, most urgent first),
// rather than a goroutine per lock. A renewal that fails, or finds the key gone or
// held by someone else, ends that lease with ErrLeaseLost. Fixed-TTL leases
// end on a local timer started before the acquire request was sent, so the
// client never believes it holds a key longer than Redis does. For the same
// reason a renewal pipeline may not outlast the earliest validity in its
// batch (the send time of the last successful renewal plus the TTL).
//
// A server that dies is noticed at the first renewal after it stops
// answering, plus however long the client takes to give up: go-redis
// retries a refused dial (Options.DialerRetries, 5 tries 100ms apart by
// default). With DialerRetries set to 1, every lease learns of the loss
// within one renewal interval.
//
// # Waiting
//
// Waiters subscribe to the key's channel through one pub/sub connection per
// engine; a release publishes, and the engine wakes one local waiter per
// message (all of them in fair mode, where only the queue head can win). A
// holder whose fixed TTL runs out publishes nothing, so a waiter also wakes
// when the holder's PTTL says the key will be free, and in any case after the
// recheck interval: a lost message costs a delay, never a hang. Waiting
// writers register in the :ww set, and new readers stay out while a writer
// waits, so readers cannot starve writers. With WithFair, writers are granted
// in arrival order; a waiter that stops refreshing its place (a crashed
// process) is dropped after the queue TTL.
package redis

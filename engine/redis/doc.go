// Package redis is the cerberus engine for Redis, on go-redis v9: a single
// node, Sentinel or Cluster through one client interface.
//
// # Data
//
// A lock key K lives in up to thirteen Redis keys that share one hash slot (a
// {tag} built from K), so every script works on Redis Cluster:
//
//	<prefix>{k:K}:w   the exclusive holder's lease id, with PX = lease TTL
//	<prefix>{k:K}:r   sorted set of shared holders, scored by expiry (server time)
//	<prefix>{k:K}:ww  sorted set of waiting writers, scored by a waiter deadline
//	<prefix>{k:K}:q   list: arrival order of queued writers (see Waiting)
//	<prefix>{k:K}:f   the fencing counter (see Fencing tokens); it is kept forever
//	<prefix>{k:K}:h   hash: each waiting writer's registration (see Hand-off)
//	<prefix>{k:K}:rw  sorted set of waiting readers, scored by a waiter deadline
//	<prefix>{k:K}:c   the channel a release wakes waiting readers and watchers on
//	<prefix>{k:K}:x   "<id> <value>" of an exclusive holder with a Value, PX = lease TTL
//	<prefix>{k:K}:v   hash: each reader's "<token> <value>" by lease id
//	<prefix>{k:K}:cq  list: arrival order of waiting counted readers
//	<prefix>{k:K}:wt  the watch mark: someone watches K (expires by itself)
//	<prefix>{k:K}:o   set: lease ids a force release freed (expires after ReleaseMarkTTL)
//	<prefix>wake:E    engine E's channel: a release names the writer it wakes
//
// Keys containing '}' use {h:<sha256 of K>} as the tag instead. Only the
// fencing counter outlives a lock (and a force release's mark, for an
// hour): it must, so that tokens keep increasing after a key is released,
// expires or the client restarts.
//
// # Scripts
//
// Acquire, release and renew are each one Lua script, run with EVALSHA and
// falling back to EVAL after NOSCRIPT. Every grant raises the fencing
// counter (see Fencing tokens) and returns it as Token. Release and renew
// compare the stored lease id first: a stale lease changes nothing. A
// Release that gets no answer (the op timeout or a broken connection:
// engine.ErrUnavailable; or the caller's context ended) ends the lease,
// and the engine sends the same release again in the background (see
// Waiting), from 50ms later and up to once a second, until the server
// answers or the lease's validity has run out: a blip costs the key's
// waiters the blip, not the lease's TTL.
// Reader expiry uses the server's clock (TIME), never the client's.
//
// # Fencing tokens
//
// Every grant (an acquire, a release's hand-off, a reader's grant) sets
// the key's counter :f, in the script that grants, to
//
//	max(counter + 1, clock)
//
// and that is the lease's Token. clock is the server's clock (TIME) in
// units of 8µs since 2025-01-01T00:00:00Z: floor((sec*1e6 + usec -
// 1735689600*1e6) / 8), about 7.5e12 in 2026. Each grant of a key needs a
// round trip of its client after the previous holder's release, and no
// key is granted 125,000 times a second (one key takes about 8,000
// uncontended cycles a second on the 2-core test machine), so the counter
// does not run ahead of the clock: it is the clock at each grant, or just
// above it. A counter the server forgets therefore starts again above
// every token granted before:
//
//   - a restart without persistence: TestTokensAfterRestartWithoutPersistence;
//   - a crash (kill -9) that loses the writes since the last snapshot:
//     TestTokensAfterSnapshotRestore;
//   - FLUSHALL or FLUSHDB: TestTokensAfterFlush (exclusive, shared and
//     hand-off grants);
//   - eviction under maxmemory with an allkeys-* policy:
//     TestTokensAfterEviction;
//   - a promoted replica that lacked the last grants: an operator's
//     REPLICAOF NO ONE (TestTokensAfterReplicaPromotion) or Sentinel's
//     failover (TestSentinelTokensAfterFailover);
//   - a Redis Cluster master restarted empty (each key's counter is on its
//     slot's master): TestClusterTokensAfterMasterRestart;
//   - Redlock nodes restarted together: TestRedlockTokensAfterMajorityRestart.
//
// A new client or engine continues from the counter as it is (the
// conformance suite's TokensIncrease closes an engine and goes on with a
// fresh one), and TestTokenIsServerClock checks the unit.
//
// This rests on one assumption: the clock of the server that makes the
// first grant after the loss is not behind the clock of the server that
// made the last grant before it, by more than the time between the two
// grants. A restarted server's clock must not step back across the
// restart, and a promoted replica's clock must not be behind the old
// primary's by more than the failover took. A clock set back further (a
// large NTP step, a wrong clock on a new machine) can give a smaller token
// once the counter is lost; while the counter is kept, tokens increase
// whatever the clock does.
//
// Tokens fit in 48 bits until about 2096 (2^48 ticks of 8µs are about 71
// years), as failover.Manager's epoch<<48 | token needs. The counter is
// written as an integer string and Lua's numbers (doubles) hold it
// exactly; past 10^14 (about 2050) Lua would write a number in exponent
// form, so the scripts format tokens with string.format('%d')
// (TestTokensBeyondFourteenDigits). Scripts call redis.replicate_commands first, so that Redis 3.2
// to 4.x replicates the writes of a script that read TIME; from Redis 5 on
// that is the default.
//
// # Renewal
//
// Leases without a fixed TTL are renewed at a third of their TTL by one
// renewal loop per engine that pipelines every lease that is due (1000
// scripts a pipeline, up to four pipelines in flight, most urgent first),
// rather than a goroutine per lock. A renewal that fails, or finds the key gone or
// held by someone else, ends that lease with ErrLeaseLost. Fixed-TTL leases
// end on a local timer started before the acquire request was sent, and
// engine.Margin (a tenth of the TTL, 5ms to 2s) before the TTL runs out, so
// the client stops believing it holds a key before Redis can give it to
// anyone else, even when its timers run late. For the same reason a renewal
// pipeline may not outlast the earliest validity in its batch (the send time
// of the last successful renewal plus the TTL, less the margin), and a grant
// whose reply arrives after that validity is refused and given back.
//
// A server that dies is noticed at the first renewal after it stops
// answering, plus however long the client takes to give up: go-redis
// retries a refused dial (Options.DialerRetries, 5 tries 100ms apart by
// default). With DialerRetries set to 1, every lease learns of the loss
// within one renewal interval.
//
// # Waiting
//
// Every engine keeps one pub/sub connection. Waiting writers listen on the
// engine's wake channel, subscribed at its first wait and kept until Close,
// so a contended acquisition costs no SUBSCRIBE or UNSUBSCRIBE, and once it
// is subscribed a waiter listens before its first attempt; a release that
// leaves a writer waiting hands the key to it (see Hand-off) and publishes
// the grant on that writer's engine's channel, so one release serves one
// waiter across every process. Waiting readers listen on the key's
// channel, where a release with no writer but a reader waiting publishes
// "*". A holder whose fixed TTL runs out
// publishes nothing, so a waiter also wakes when the holder's PTTL says
// the key will be free, and in any case after the recheck interval: a lost
// message costs a delay, never a hang. The recheck pause is drawn between
// half the interval and all of it, so that waiters that began together
// do not try again together. A waiter that has been refused once (so
// holds a place on the server) outlasts a server that stops answering for
// less than the queue TTL since its last answer (an attempt that times
// out, say, on a server stopped or busy for a second or two): it keeps
// waiting and tries again after its recheck pause, and an attempt whose
// grant went unanswered is found again by the next one (its own id in :w).
// Past the queue TTL, or on the first attempt, Acquire fails with
// engine.ErrUnavailable. An attempt that ends without a lease undoes what
// it may have left (its place, a grant whose reply was lost) at once; an
// undo, or a release, that gets no answer is sent again by the engine's
// sweeper, one pipeline for all of them, until the server answers, and an
// undo of an attempt that got no answer once more after that, since a
// stopped server that resumes runs what it had received in no set order.
// Waiting writers register in the
// :ww set, and new readers stay out while a writer waits, so readers cannot
// starve writers.
//
// Writers that queue in :q are served in arrival order, and a free key
// goes only to the queue head. With WithFair every waiting writer queues.
// By default a writer barges (takes a free key on arrival, the fast path)
// and queues only once it has waited WithStarvation (10ms), so a burst of
// new arrivals cannot keep an old waiter out for long. A queued waiter
// that stops refreshing its place (a crashed process) is dropped after the
// queue TTL.
//
// A release that nobody waits for (or watches) publishes nothing: waiting readers
// register in :rw as waiting writers do in :ww, so the release script
// knows whether anyone listens.
//
// # Hand-off
//
// A release that leaves a writer waiting, with no live reader holding the
// key, grants the key to that writer itself: the queue head, or in the
// default mode the waiter that has gone longest without trying. The script
// sets :w to the waiter's lease id with the TTL the waiter registered,
// takes the fencing token, and publishes the grant on the waiter's
// engine's wake channel, so the waiter starts without a round trip and
// the key is never idle between holders. A copy of the grant stays in :h
// until the new holder's release, for a waiter whose message was lost: its
// next attempt finds its own id in :w and reads it there.
//
// The waiter must never count the lease as valid longer than the server
// keeps it. Each refused attempt of a waiting writer registers in :h the
// server time r of its execution and its attempt number a; the waiter
// remembers the local send time s(a) of each attempt. The grant carries
// d = g - r, the server's measure from the registration it served to the
// grant at g, and a. The waiter counts the lease from
//
//	s(a) + d
//
// which is never later than the grant: s(a) precedes the attempt's
// execution at r on the real time line (a request is sent before it
// runs), so s(a) + d <= r + (g - r) = g, assuming only that the server's
// clock advances no faster than real time between r and g, the same
// assumption PX expiry itself makes. The server keeps the key until
// g + TTL; the waiter's Done closes at s(a) + d + TTL - engine.Margin,
// earlier by at least the margin. The time the message spends in flight or
// queued plays no part: a delayed delivery leaves the count's start where
// it is and so only shortens what is left of the lease, and a delivery
// later than the lease's life is refused and the key given back. An
// attempt number the waiter no longer keeps (it keeps the last eight) or
// does not know is replaced by its first attempt, sent earlier still; a d
// below zero (the server's clock stepped back) counts as zero. The test
// TestHandOffDelayedDelivery delays the waiter's pub/sub delivery and
// checks both bounds; TestHandOffFoundByAttempt checks them for a grant
// read from :h. A waiter that gives up leaves the queue before it
// releases, so a hand-off made meanwhile is given back and none can follow.
//
// # Semaphores: counted readers
//
// A Shared request with a Limit (engine.Request.Limit) is counted by the
// shared acquire script itself, so the count holds across every process
// with no client-side state: the script prunes the readers whose expiry
// (server time) has passed, from :r and :v, and refuses while Limit or
// more unexpired readers remain. Writers exclude counted readers as they
// exclude any reader. A crashed holder's permit frees itself when its
// lease expires on the server, the lease rules above (a renewed lease
// within its TTL of the last renewal).
//
// Counted waiters are served in arrival order. A refused counted reader
// that waits registers in :rw as every waiting reader does, and also takes
// a place at the end of :cq (once). A counted request is granted only when,
// counting the live waiters of :cq from its head (live: a place in :rw
// that has not run out; dead ones are dropped as the scan meets them),
// it comes before as many as there are free permits, or, not being in
// :cq, finds fewer waiters than free permits. So a holder that releases
// and asks again at once queues behind the waiters instead of taking the
// permit back; TestSemaphoreFairUnderContention (16 clients, 3 permits)
// checks that every client gets at least 0.8 of the most any gets.
//
// Every reader's release runs luaHandOff when a reader waits, which
// publishes "*" on the key's channel: all waiting readers (of every
// process) try again and the queue decides who gets the permit, which
// costs one script per waiting reader per release. A counted refusal
// returns the time until the earliest reader's expiry, so a waiter also
// tries again when a crashed holder's permit runs out, and in any case
// after the recheck interval. A waiter that gives up leaves :rw and :cq
// and wakes the waiters behind it.
//
// # Holders and values
//
// A grant stores what engine.Inspector reports. A reader's grant puts
// "<token> <value>" into :v under its lease id, in the same script (no
// round trip more), and its release, or the pruning of its expired entry,
// removes it; :v expires with :r. An exclusive holder's token is the
// fencing counter itself, since no grant can take a token while it holds;
// its Request.Value, only when it has one, goes to :x with the lease's PX
// (renewed with it, deleted at release), and a writer waiting with a
// value registers it in :h so that a hand-off stores it too. An
// uncounted lease without a value therefore costs the exclusive hot path
// nothing but a longer command line.
//
// Holders runs one read-only script: the exclusive holder (from :w, :f and
// :x, whose value counts only if it names the holder) and every reader
// whose expiry by the server's clock is ahead, sorted by token.
//
// # Force release
//
// Engine.ForceRelease runs one script: it reads the holders as Holders
// does, adds their lease ids to the mark :o (ReleaseMarkTTL to live),
// deletes :w, :x, :r and :v, and serves the waiters as a release does
// (see Hand-off), so a waiting writer is granted the key with the next
// token in the same script. The holder, in any process, learns it from
// its next renewal: a renewal that finds its lease gone, or that could not
// be sent before the server's own expiry of the key (a process resumed
// from a SIGSTOP), asks the mark in one pipeline for all such leases
// (bounded by 500ms) and ends the lease with engine.ErrReleasedByOperator
// if the mark names it, engine.ErrLeaseLost otherwise. A lease whose
// renewals merely time out until its validity ends is lost at once, as
// before: its Done must close before the server can grant the key again. A Release that finds its lease
// gone asks the same. Redlock.ForceRelease frees the key on every node; a
// quorum must answer, and the first node lease told ends the Redlock lease
// without re-taking any node.
//
// # Watch
//
// Watch subscribes to the key's channel :c on the engine's one pub/sub
// connection (shared with the waiters) and sets the watch mark :wt for 15
// seconds, renewing it every 5 seconds while it runs; both are done before
// Watch returns. Every grant and release script that finds the mark
// publishes "w" on :c (unless it published "*" already), which wakes
// watchers and no waiter. A key that nobody watches publishes nothing: the
// uncontended exclusive grant checks the mark in the EXISTS it already
// makes (a watched key takes the script's slower path), and the release
// in the EXISTS that decides whether anyone waits, so the cost for an
// unwatched key is one more key in those EXISTS calls. A watched key
// costs a PUBLISH per grant and release, for up to 15 seconds after its
// last watcher ends. When go-redis reconnects and subscribes again, every
// watcher of the channel is told, since a message may have been lost. A
// holder's expiry (a crashed process) publishes nothing; callers re-read
// on their own interval, as engine.Watcher allows.
//
// # Redlock
//
// NewRedlock runs the Redlock algorithm over independent masters (see
// Redlock). A renewed lease re-takes every node that does not hold it
// (right after the grant, when a node loses it, and every TTL/3 while one
// is missing), so it keeps as many nodes as are free and healthy instead
// of decaying to a bare majority; the lease's Nodes method (engine.NodeCounter)
// reports held and total nodes for metrics. A node taken again adopts the
// lease's token (its own draw came later and is larger), so that a force
// release and the inventory report the token the holder fences with.
//
// Two holders can still overlap in one case: nodes lose the key a holder
// A has there (a restart without persistence, FLUSHALL, eviction, or a
// failover to a replica without the key), and another client B is granted
// a majority made of those nodes and of nodes A does not hold, before A's
// next renewal on a node that lost it. A does not hold a node that was down
// or held by someone else at A's last re-take round, or was freed since
// (rounds run every TTL/3). With every node healthy, B therefore needs a
// majority of the nodes to lose A's key within one renewal interval; when
// A holds a bare majority (the others being down or held elsewhere), one
// node losing it suffices (go-redsync/redsync issue 186). The overlap
// lasts until A's node engine renews that node and finds B there (its
// renewals run every TTL/3 and end within WithOpTimeout), plus one re-take
// round (at most three times the node timeout): at most TTL/3 + the renewal
// round trip + 3 × node timeout after the key was lost; then A's lease
// ends with ErrLeaseLost. With TTL 900ms the tests measure about 250ms. The usual
// Redlock assumptions hold besides: clocks that drift less than the drift
// factor, and no process paused longer than the lease's validity.
//
// In that window the fencing token is what protects a resource: B's token
// is larger than A's, even when every node of B's majority lost its
// counter after A's grant raised it (then the nodes' clocks carry it; see
// Fencing tokens and Redlock), so a resource that keeps the largest token
// it has seen refuses the older holder's writes.
//
// Healing costs nothing while every node holds every lease. Re-taking a
// node is two round trips for each lease (the acquire script, then the
// fence raise), at most 64 leases at a time per engine.
//
// Redlock does not count: Redlock.Limits reports Counted false, so a
// request with a Limit is refused. Each node would count its own permits,
// and a majority of nodes each below the limit does not bound the permits
// held across them.
//
// # Security: AUTH, ACL users and TLS
//
// The engine uses the go-redis client it is given, so passwords, ACL users
// and TLS are set on that client: Options.Password (and Username for an
// ACL user) and Options.TLSConfig, or the same fields of ClusterOptions,
// FailoverOptions and UniversalOptions. Redis does not echo passwords, and
// errors from the engine carry Redis's reply (WRONGPASS, NOAUTH, NOPERM),
// never a password; they wrap engine.ErrAccessDenied and not
// engine.ErrUnavailable, since a wrong password is no outage. A client on a
// TLS-only port without TLS, or with a certificate the server does not
// accept, fails its first command with a connection error
// (engine.ErrUnavailable), not a hang.
//
// # Errors
//
// Server failures are *engine.OpError values. They wrap
// engine.ErrUnavailable when the server is not serving now: any failure
// without a Redis reply (dial, I/O, the engine's own timeout, a closed or
// exhausted pool) and the replies LOADING, MASTERDOWN, TRYAGAIN,
// CLUSTERDOWN, BUSY, READONLY and "max number of clients reached". They
// wrap engine.ErrAccessDenied for NOAUTH, WRONGPASS and NOPERM. Other
// replies, such as a script error, wrap neither, and nothing does once the
// caller's context has ended: Acquire then returns engine.ErrNotAcquired
// joined with ctx.Err().
//
// A Redis 7 ACL user for the engine needs only these commands, on keys and
// channels under its prefix (here the default "cerberus:"):
//
//	ACL SETUSER cerberus on >PASSWORD resetkeys ~cerberus:* resetchannels &cerberus:* nocommands +ping +evalsha +eval +script|load +subscribe +unsubscribe +publish +client|setname +exists +get +set +del +incr +pexpire +pexpireat +pttl +time +zadd +zrem +zscore +zcard +zcount +zrange +zrangebyscore +zremrangebyscore +lindex +lpop +lpos +lrem +rpush +hget +hset +hdel
//
// EVALSHA, EVAL and SCRIPT LOAD run the acquire, release and renew
// scripts (EVAL after the server lost its script cache); Redis checks the
// commands the scripts call (EXISTS through RPUSH above; PUBLISH wakes
// waiters) and the keys they touch against the user's rules as well. PING
// is Engine.Ping and go-redis's pub/sub health check; SUBSCRIBE and
// UNSUBSCRIBE are the waiters' notifications. CLIENT SETNAME is needed only
// when the client sets ClientName (config.Build does); HELLO and AUTH need
// no permission, and go-redis ignores a refused CLIENT SETINFO. A Redis
// Cluster client also needs +cluster|slots to learn the slot map. A user
// without EVALSHA or EVAL gets an error saying "NOPERM this user has no
// permissions to run the 'evalsha' command" from Acquire.
package redis

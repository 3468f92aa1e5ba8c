// Package consul is the cerberus engine on Consul: sessions, KV locks and
// blocking queries, through github.com/hashicorp/consul/api.
//
// # Sessions
//
// Each Engine creates one Consul session (on its first Acquire) and backs
// every lease with it. A goroutine renews it every TTL/2 (WithSessionTTL,
// default 10s) and, in between, watches it with a blocking query. When the
// session is invalidated (destroyed from outside, a tied health check
// failed, or its TTL ran out) or cannot be renewed for a whole TTL, every
// lease it backs closes Done with engine.ErrLeaseLost, and the next Acquire
// creates a new session. The session's behaviour is "delete": Consul deletes
// the keys of an invalidated session, so a dead holder leaves nothing.
// Sessions can be tied to health checks with WithHealthChecks. An agent
// that has just started refuses sessions until its node is in the catalog
// (its first anti-entropy sync); the engine retries a refused creation for
// up to 5s, within the Acquire's context.
//
// Lock-delay (WithLockDelay, default 10s; Consul's own is 15s) is the safety margin
// after an invalidation: the keys the session held cannot be locked again
// for that long, which gives a holder that has not yet noticed its loss (a
// paused process, a partitioned host) time to stop before someone else
// starts. Releases, fixed-TTL expiry and Close delete keys explicitly, so
// they never leave a lock-delay behind; only invalidations do.
//
// # Leases and TTLs
//
// Consul session TTLs run from 10s to 24h, and a holder that stops talking
// (crashed, paused, cut off) keeps its keys until Consul invalidates its
// session, which Consul does between one and two TTLs after the last
// renewal, and then for the lock-delay. That is the engine's Floor (see
// Floor and engine.Limits): 2 x 10s + 10s = 30s with the defaults, 20s at
// best (WithSessionTTL(10 * time.Second), WithLockDelay(0)). A lease period
// below the Floor cannot be honoured, so Validate refuses it with
// engine.ErrInvalidTTL, and package config refuses it at load time.
// With Request.Renew a lease lives as long as the session. Without it, a
// local timer ends the lease at Request.TTL: it deletes the key on the
// server and closes Done with engine.ErrLeaseLost.
//
// # Keys
//
// A lock key K lives in the KV folder P/E/, where P is the prefix
// (WithPrefix, default "cerberus/locks") and E is EncodeKey(K): letters,
// digits and '-' as they are, every other byte as "_XX". Every key
// engine.CheckKey accepts can be stored, with no '/', '.' or '..' segment
// for HTTP path cleaning to rewrite. In the folder:
//
//   - P/E/lock is the lock document. An exclusive holder creates it and
//     holds it with the session (KV acquire, in a transaction that also
//     checks it did not exist). Its value records the holder's label
//     (WithHolderLabel), the lease and its token.
//   - P/E/c-<lease> are the contender keys of shared holders (Consul's
//     semaphore recipe): each is held with its holder's session, and the
//     lock document, unlocked, lists the holders. Readers join and leave
//     with check-and-set on the document; a writer needs the document
//     absent, so writers exclude everyone. Holders whose contender key is
//     gone (invalidated session) are pruned by the next writer, in a
//     transaction that respects their lock-delay.
//   - P/E/fence is the key's fencing counter (see Tokens). It is the one
//     entry a released key leaves behind.
//
// Release deletes what the grant wrote, with a check on the ModifyIndex of
// the grant, so a stale lease changes nothing; the last holder deletes the
// document, so the KV store does not fill with dead locks (only the fencing
// counter stays).
//
// # Tokens
//
// Every grant, exclusive or shared, sets the key's fencing counter
// P/E/fence, in the transaction that grants, to
//
//	max(counter + 1, clock)
//
// and that is the lease's Token, also recorded in the holder's entry of
// the lock document. clock is the clock of the process that grants, in
// units of 8µs since 2025-01-01T00:00:00Z (about 7.5e12 in 2026), as on
// the Redis engine. Consul runs no scripts, so the new value is computed
// from the counter as last read and written with a check on the
// counter's ModifyIndex (or, for a new key, its absence): a grant in
// between fails the check and the grant reads again, so no two grants get
// the same token, and each shared holder has its own. A release keeps the
// counter: one small entry per key ever locked stays under the prefix. A
// grant is a Raft write, and no key is granted 125,000 times a second, so
// the counter does not run ahead of the clock: a counter the agent loses
// starts again above every token granted before:
//
//   - a dev agent (-dev, store in memory) killed and restarted:
//     TestDevAgentTokensAfterRestart;
//   - an older snapshot restored (consul snapshot restore), on a dev agent
//     restarted empty: TestTokensAfterSnapshotRestore;
//   - the key's KV folder deleted: TestTokensAfterTreeDeleted.
//
// Servers that are not in dev mode keep the counter, as they keep all
// their data (TestClusterTokensAfterKill, TestClusterTokensAfterLeaderKill).
// A new client or engine continues from the counter as it is
// (TestTokensAfterClientRestart), and TestTokenIsClock checks the unit.
//
// This rests on one assumption: the clock of the process that makes the
// first grant after the loss is not behind the clocks of the processes
// that granted the key before, by more than the time since their grants
// (its clock did not step back across a restart; the clients' clocks are
// within that margin of each other). A clock set back further (a large NTP
// step, a wrong clock on a new machine) can give a smaller token once the
// counter is lost; while the counter is kept, tokens increase whatever the
// clocks do. The clock is the client's, not the agent's: a transaction
// cannot read the agent's clock, and the Date header of its answers counts
// whole seconds. Tokens fit in 48 bits until about 2096 (2^48 ticks of
// 8µs are about 71 years), as the Failover's epoch<<48 | token needs.
//
// The counter costs no round trip in the common case: an engine remembers
// the counter its last grant of a key wrote (for up to 1024 keys), so its
// next uncontended exclusive grant of that key is one transaction, as
// without the counter (TestUncontendedGrantIsOneRequest). An exclusive
// grant of a key the engine has not granted before reads the key first
// (two round trips), and one whose remembered counter another engine has
// changed since fails its check, reads and tries again (three). A shared
// grant reads the key anyway.
//
// # Semaphores (counted shared leases)
//
// A counted request (engine.Request.Limit above 0) follows the same
// recipe, with the limit checked in the grant transaction: the request is
// refused while the unlocked document lists Limit holders whose contender
// key is still held, and the check-and-set on the document's ModifyIndex
// makes the count exact, as any grant or release in between fails the
// transaction, which then reads again. Listed holders whose contender key
// is gone (their session was invalidated) are dropped by the grant that
// needs their permit, in the same transaction, which locks and deletes
// each dead contender key, so Consul refuses it during that holder's
// lock-delay: a crashed holder's permit frees itself within the Floor,
// like any lease, and never while its holder may still think it holds it.
// A counted waiter is ordered like a writer: after WithStarvation of
// racing (or at once in fair mode) it joins the key's queue, and goes when
// no writer queued before it remains and the waiters queued before it,
// with the live holders, leave a permit for it (so it takes none that an
// earlier waiter could use, and up to Limit waiters go at once); while
// anyone queues, a counted first attempt fails (it checks the queue
// marker's absence, as a writer's does), so permits go in arrival order. Uncounted requests are unchanged: no
// count, no extra operation.
//
// Request.Value is stored in the holder's entry of the lock document (for
// an exclusive holder, its only entry), so it costs no extra write.
//
// # Holders and Watch
//
// Holders (engine.Inspector) lists the key's folder in one consistent
// read: a locked document names the exclusive holder; an unlocked one
// lists the shared holders, of which those whose contender key is still
// held are reported, in token order. Each entry carries the token its
// grant took (see Tokens).
//
// Watch (engine.Watcher) makes Consul blocking queries on the key's folder
// (key names only), each from the index the last returned and bounded by
// WithRecheck, and tells when the index moves. Grants, releases,
// invalidated sessions and queue changes all move it. After a failed query
// it tells anyway and backs off (100ms to 2s) before asking again. One
// goroutine per Watch, ended by its context or Close.
//
// # Force release
//
// ForceRelease (engine.Releaser) reads the key's folder once, then frees it
// in one transaction checked against the lock document's index: it
// deletes the document (and the shared holders' contender keys) and writes
// a tombstone per freed holder, "<prefix>/.released/<session>/<lease id>",
// locked with the holder's own session, so that Consul deletes it when
// that session ends. A document changed meanwhile is read again (up to 32
// times). The deletion moves the folder's index, so waiters' blocking
// queries return at once, in fair mode too (a holder's queue key went with
// its grant), and the next grant raises the fencing counter above the
// freed tokens. One transaction frees at most 31 shared holders; a key
// with more is an *engine.OpError. A holder of another engine is told
// after its session's next renewal (every WithSessionTTL/2): the renewal
// is followed by one KV read of its session's tombstones, which ends the
// leases named with engine.ErrReleasedByOperator and deletes them; that
// read is skipped while the engine holds nothing. A holder stopped
// (SIGSTOP) through the release is told at its first renewal after it
// resumes, if Consul still has its session (it keeps one for up to twice
// its TTL); otherwise the session is gone and it is told that
// (engine.ErrLeaseLost). The engine's own freed leases end at once. A
// freed lease's Release finds its document gone or changed:
// engine.ErrNotHeld, and the next holder's grant is left alone.
//
// # Waiting
//
// A waiting Acquire makes blocking queries from the last index it saw;
// each is bounded by WithRecheck (default 5s), after which the key is
// checked again even without a change, so a missed change costs a delay,
// never a hang. Every call uses the caller's context (and Close ends it).
//
// In the default mode waiters watch the key's folder and race after each
// release; one wins. That is the cheapest when contention is low. A writer
// that has raced for longer than WithStarvation (20ms) joins the queue
// described below instead, and while anyone queues the key goes in
// arrival order: the queue marker P/E/queue exists, and a writer's first
// attempt, which need not read the key (see Tokens), checks in its grant
// transaction that the marker does not exist, and queues if it does. The last waiter's grant deletes the
// marker (checking its index, which every enqueue rewrites), an abandoned
// wait that leaves the queue empty deletes it, and a writer that meets a
// marker with no one queued clears it. Counted readers (semaphore permits)
// do as writers do. Uncounted readers in the default mode do not queue, so
// a steady stream of them can still hold a writer off.
//
// In fair mode (WithFair) a waiter that does not get the key at once joins
// a queue: a waiter key P/E/w-x-<lease> (writer) or P/E/w-s-<lease>
// (reader), held with the session, whose CreateIndex is its place. A writer
// goes when no one queued before it remains, an uncounted reader when no
// writer queued before it remains, a counted one also only when there is a
// permit for it and for each waiter before it; each waiter watches only the key it waits for (the
// nearest waiter it must let go first, or the lock document), so a release
// wakes one waiter, not the queue. The grant transaction deletes the waiter
// key; an abandoned wait deletes it too, and a crashed waiter's key goes
// with its session. Single attempts fail while a waiter they would overtake
// is queued; in the default mode, a writer's or counted reader's single
// attempt fails while anyone queues.
//
// # Configuration and errors
//
// New takes a *api.Client the caller owns; Dial builds one (WithTLS).
// WithToken and WithDatacenter apply to every request. The ACL token is
// sent in a header and never appears in errors: server failures are
// *engine.OpError values with the token scrubbed from the text. They wrap
// engine.ErrUnavailable when the agent could not be reached, the
// connection broke, it answered 5xx or 429, or it knows no leader;
// engine.ErrAccessDenied when its ACLs refused (401, 403, "Permission
// denied", "ACL not found"); and neither for other answers, nor once the
// caller's context has ended (Acquire then returns engine.ErrNotAcquired
// joined with ctx.Err()).
//
// # ACL tokens
//
// On an agent with ACLs on and default_policy "deny", the engine's token
// (WithToken) needs only this policy, for the default prefix (use the
// prefix given to WithPrefix, with a trailing '/'):
//
//	session_prefix "" { policy = "write" }
//	key_prefix "cerberus/locks/" { policy = "write" }
//
// session write creates, renews, reads and destroys the engine's session;
// session_prefix "" allows it on every node, and session "<node>" (the
// node name of the agent the engine talks to) narrows it to that agent.
// key write on the prefix covers the lock documents, contender keys, fair
// queue keys, their blocking queries and the KV transactions. Ping asks
// for the raft leader, which needs no token, so a missing or wrong token
// does not show in health checks: it shows at the first Acquire, which
// fails at once (no retry until the context ends) with an *engine.OpError
// that wraps engine.ErrAccessDenied, not engine.ErrUnavailable, and carries
// Consul's reason:
// "ACL not found" for an unknown token, "Permission denied: ... lacks
// permission 'session:write'" or "'key:write'" for a missing right.
package consul

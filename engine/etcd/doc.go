// Package etcd is the etcd engine: the revision-ordered queue of etcd's own
// client/v3/concurrency.Mutex on go.etcd.io/etcd/client/v3, with shared
// and counted modes, cancellable waits, one etcd lease per engine and an
// honest view of that lease.
//
// # Layout
//
// Each lock key has a queue range under the prefix (DefaultPrefix,
// "/cerberus/locks/"): the prefix, the key, and a NUL byte, which no key
// contains, so that no key's range holds another's. Every acquisition puts
// one entry in its key's range, named by the engine's etcd lease id, a
// slot number and its mode and limit; the entry's value is Request.Value.
// Queue order is the entries' create revisions. Slots are reused once an
// entry is gone, so an engine's names repeat: etcd indexes every name it
// has seen until the next compaction and a range read walks them all, so
// a fresh name per acquisition would slow every later read of a busy key
// (concurrency.Mutex reuses one name per session for the same reason).
// Every delete compares the entry's create revision, so a stale release
// never removes a later entry of the same name.
//
// # Acquire
//
// An acquisition puts its entry, attached to the engine's etcd lease, and
// reads the key's range sorted by create revision, in one transaction (one
// round trip). Then it decides, as concurrency.Mutex does: an exclusive
// entry is granted when no entry has a lower create revision; a shared
// entry when no exclusive one has, so a reader waits for earlier writers
// only, and a reader behind a writer never waits for writers that came
// after it. A counted shared entry (Request.Limit) also waits until fewer
// than Limit entries are ahead of it; those are all shared then, and every
// one of them holds. Later entries never count, so waiters are served in
// arrival order by construction and no newcomer barges.
//
// A waiter watches the one entry it waits for (the next lower entry that
// blocks it), from just after the revision at which it read the range, so
// that no deletion is missed and a release wakes exactly one waiter (no
// herd). When that entry was the only one ahead that could block it, its
// deletion is the grant: etcd gives every new entry a higher revision than
// every existing one, so nothing joins ahead, and the hand-off costs the
// release's one write and one notification. Otherwise it reads the range
// again. A counted waiter held back by the count watches the deletions in
// the range (any of the holders ahead may free its permit), filtered to
// the entries ahead of it. Every wait reads the range again after
// DefaultRecheck (WithRecheck), so a lost notification costs a delay,
// never a hang.
//
// A waiter whose context ends, or whose engine closes, deletes its entry
// before it returns (waiting up to kit.UndoWait, then in the
// background); a TryLock that finds the key held does the same. Whatever
// a failure leaves behind is attached to the engine's etcd lease and goes
// with it at the latest.
//
// # Tokens
//
// Lease.Token is the entry's create revision: etcd's revision is one
// counter for the whole cluster, raised by every write and never reused,
// so tokens strictly increase over the grants of a key across clients,
// engines and restarts. It is the header revision of the transaction that
// put the entry, so it costs nothing more.
//
// # Leases and the etcd lease
//
// Every engine grants one etcd lease (WithLeaseTTL, DefaultLeaseTTL) at
// its first Acquire and renews it every third of its TTL with a
// keep-alive. The engine keeps its own clock of the lease's expiry, counted
// from when each renewal was sent: if no renewal is answered before that
// expiry less engine.Margin, or etcd answers that the lease is gone
// (expired or revoked), every lease granted under it ends at once with
// engine.ErrLeaseLost (Request.OnLost before Done), and the next Acquire
// grants a new etcd lease. A revoked lease is seen at the next renewal,
// within a third of the TTL.
//
// With Request.Renew a lease lasts until released. Without it the engine
// ends the lease with a local timer at Request.TTL and deletes its entry.
// Periods shorter than the etcd lease TTL are accepted, but a holder that
// stops talking (crashed, paused, cut off) keeps its keys until etcd
// expires its lease: Limits().Floor is the lease TTL plus a second. A
// leader election while the holder is silent can stretch that: a new
// etcd leader renews every lease to its full TTL (plus its election
// timeout), so the bound is then the time to the election plus the TTL.
// The fencing token covers a holder that outlives its key.
//
// A release deletes the entry. If the delete gets no answer, the lease
// ends with engine.ErrLeaseLost (it may or may not hold) and the delete
// is retried in the background. Close revokes the etcd lease, which
// deletes every entry of the engine in one request.
//
// # Inspection
//
// Engine.Holders reads a key's range and applies the grant rule to it;
// Engine.Watch forwards an etcd watch on the range.
//
// # Force release
//
// Engine.ForceRelease reads the key's queue and, in one transaction that
// compares each holder's create revision, deletes the holders' entries
// and puts a mark for each, "<prefix>\x01released/<etcd lease id>/<create
// revision>", on an etcd lease of ReleaseMarkTTL of its own. The next
// waiter watches the deleted entry and is granted at once, with its own,
// higher create revision. The holder's engine reads the marks of its etcd
// lease after every keep-alive (a third of the lease TTL) and, when the
// process resumes from a pause past the lease's expiry, before it
// declares that lease lost (a loss on time is not delayed), ends the
// leases they name with engine.ErrReleasedByOperator, and deletes them.
// Its etcd lease, shared with its other leases, is not touched.
//
// # Clients and credentials
//
// New takes a *clientv3.Client the caller made and never closes it; Dial
// makes one from a clientv3.Config (endpoints, TLS, username and password)
// and closes it on Close. Credentials stay in the client; errors name
// endpoints and keys, never passwords.
//
// # Errors
//
// Invalid requests fail before any I/O with engine.ErrInvalidKey,
// engine.ErrInvalidTTL or engine.ErrInvalidRequest. Server failures are
// *engine.OpError values. Connection failures, a cluster without a
// leader, overload, a lost etcd lease and calls that get no answer within
// the lease TTL wrap engine.ErrUnavailable; a refusal by etcd's
// authentication or role permissions wraps engine.ErrAccessDenied and not
// engine.ErrUnavailable; other server errors wrap neither. Nothing is
// marked once the caller's context has ended: a waiting Acquire whose
// context ends returns errors.Join(engine.ErrNotAcquired, ctx.Err()).
package etcd

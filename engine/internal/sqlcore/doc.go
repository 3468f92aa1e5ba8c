// Package sqlcore is the lease strategy that the MySQL and PostgreSQL
// engines share, written once: the lease of a row (exclusive) or a reader
// row (shared) that names its owner value until it is cleared or expires
// on the server's clock; the polling grant loop (kit.Backoff, transient
// retries, the undo of a grant whose outcome is unknown) and the waiters'
// queue that makes it fair; renewal in rounds (kit.RenewRounds,
// kit.Pace); Holders;
// and the parts of the engine frame both engines put around their
// strategies (the lease registry, Ping, Close, owner values).
//
// The queue: a waiter refused once takes a ticket, a row of the
// "<table>_queue" table numbered by the server (AUTO_INCREMENT, an
// identity column) with an expiry on the server's clock. Every grant
// statement is refused while an unexpired ticket of the key that blocks it
// is below the attempt's own (below every ticket, for an attempt that has
// none): for an exclusive or counted request any ticket, for a plain
// shared one only writers' tickets, so readers at the head go together
// while no writer is ahead of them. So the key goes to the waiters in
// ticket order across processes, and a holder that releases and asks
// again at once queues behind them. A grant made with a ticket deletes it
// (in the same transaction on PostgreSQL and for MySQL's shared grants,
// in a second statement after MySQL's one-statement exclusive grant); a
// wait that ends without a grant deletes it in the background. A waiter
// that crashed stops refreshing its ticket, which then expires, at most
// ticketTTL (2s, or 4 times the longest backoff) after its last refresh,
// and is skipped from then on: it delays the queue, it never blocks it.
// The uncontended path is unchanged: a grant with no ticket in the way
// costs the same statements as before, the queue check being part of
// them.
//
// Only the head of the queue makes grant attempts: headSteady of them at
// half the engine's first delay, then doubling to its longest; the others read
// their place (a count of the tickets ahead, which locks nothing), the
// second at the head's shortest pause and those further back less often.
// Within one engine the waiters on a key line up by ticket (lineup) and
// only the first of them polls; its refreshes, a third of the way through
// a ticket's life, renew every ticket of the engine on the key (their
// owner values share the engine's prefix), and a release by the engine
// wakes it at once. So a process with hundreds of waiters on one hot key
// still sends one waiter's statements.
//
// A release that gets no answer (the server stopped or away past the op
// timeout) ends the lease with the error, and the engine sends the same
// conditional release again in the background, one goroutine per engine
// and one statement at a time, until the server answers or the lease's
// validity has run out: a blip costs the key's waiters the blip, not the
// lease's TTL (see Core.clearLater).
//
// An engine keeps only its dialect: the statements and how it sends them,
// behind Dialect, and its other strategy (MySQL's row locks, PostgreSQL's
// advisory-lock sessions), which uses the Core's Frame and Mu as well.
//
// Mux is the other part both session strategies share: the few server
// sessions on which an engine holds the locks of many leases (PostgreSQL's
// advisory locks, MySQL's GET_LOCK names), one statement at a time per
// session; picking a session that does not hold the lock already (both
// servers' session locks are reentrant); the lease validity that each
// successful statement moves on and that a timer ends; the pinger that
// keeps a session inside the server's idle cut-off, puts the server's own
// back once it holds nothing, and ends the leases a force release revoked;
// and the end of every lease of a session that died, told before its
// connection closes. An engine supplies the statements on one connection
// (MuxConn) and how to connect one (MuxDriver).
//
// The package is internal to engine/: it is no part of the public API, and
// the engines keep their Core in a named field so that its methods do not
// join theirs.
package sqlcore

// Package engine is the contract between cerberus and the servers that hold
// its locks. An engine turns a Request into a Lease on one kind of server
// (Redis, ZooKeeper, Consul, MySQL, or the in-process memory engine); the
// root package builds reentrancy, multi-key locks and failover on top of
// engines and never looks inside one.
//
// The package imports only the standard library, so an engine depends on
// nothing but this contract, the way database/sql/driver serves SQL drivers.
// Besides the interfaces (Engine, Lease) and the sentinel errors it holds
// the small helpers every engine would otherwise write again: request
// validation (CheckKey, CheckRequest, Limits, Common, Margin), the error
// rule (OpError, and Classify, which marks failures ErrUnavailable or
// ErrAccessDenied), a close-once loss signal (Signal), bounded clean-up
// after an ended wait (Background, WaitUpTo, UndoWait), and one waiter per
// key and engine on the server (Turns). Sharing them keeps the error texts,
// the order of checks and the meaning of ErrUnavailable identical across
// engines, which the conformance suite in engine/enginetest and the
// failover manager rely on.
//
// # Constructors
//
// Engines follow one rule: New takes a client the caller made (a go-redis
// client, a *consul/api.Client, a ZooKeeper connection, a database pool),
// which Close leaves open; Dial or Open takes an address or a DSN, makes
// the connection itself, and closes it on Close.
//
// # Semantics every engine meets
//
//   - Mutual exclusion: at most one Exclusive lease per key at a time, across
//     processes; Shared leases overlap each other but never an Exclusive one.
//   - Ownership: only the lease that holds a key releases or renews it. A
//     stale release (after expiry, after another grant, or a second release)
//     returns ErrNotHeld and changes nothing on the server.
//   - Leases: with Request.Renew the engine keeps the lease alive until it is
//     released; otherwise it expires Request.TTL after the grant. A holder
//     that crashes frees the key within its TTL or session timeout.
//   - Loss is visible: Lease.Done closes and Lease.Err says why as soon as the
//     engine can know, and Request.OnLost is called once.
//   - Fencing: Lease.Token strictly increases over successive grants of one
//     key on one engine, across expiry and client restarts.
//   - Waiting is notified where the server can notify, with a bounded
//     re-check so a missed notification costs a delay, never a hang.
//   - Bad input is refused before any I/O, and a failed or cancelled Acquire
//     leaves nothing behind on the server.
//   - Errors mean one thing on every engine: ErrUnavailable only when the
//     engine is not serving now (see its documentation for the rule),
//     ErrAccessDenied when access control refused, and never either when the
//     caller's context ended.
//
// engine/enginetest checks each of these against a real server.
package engine

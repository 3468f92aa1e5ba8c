// Package engine is the contract between cerberus and the servers that hold
// its locks. An engine turns a Request into a Lease on one kind of server
// (Redis, ZooKeeper, Consul, etcd, MySQL, PostgreSQL, or the in-process
// memory engine); the root package builds reentrancy, multi-key locks,
// semaphores and elections on top of engines, and package failover moves
// between them, and neither looks inside one.
//
// The package imports only the standard library, so an engine depends on
// nothing but this contract, the way database/sql/driver serves SQL drivers.
// It holds the interfaces (Engine, Lease), the optional capabilities an
// engine may add (Inspector, Watcher, Namer, Switcher, NodeCounter and the
// helpers that find them through wrappers), the sentinel errors, request
// validation (CheckKey, CheckRequest, Limits, Common, Margin) and the
// error rule (OpError, and Classify, which marks failures ErrUnavailable
// or ErrAccessDenied). The helpers an engine is built from (the frame
// Base, the loss Signal, Turns, renewal rounds, back-off) are in package
// engine/kit. Sharing them keeps the error texts, the order of checks and
// the meaning of ErrUnavailable identical across engines, which the
// conformance suite in engine/enginetest and the failover manager rely on.
//
// # Constructors
//
// Engines follow one rule: New takes a client the caller made (a go-redis
// client, a *consul/api.Client, a ZooKeeper connection, a database pool),
// which Close leaves open; Dial or Open takes an address or a DSN, makes
// the connection itself, and closes it on Close. What a constructor needs
// is an argument (the client, the addresses, the DSN); everything with a
// default is an option, and nothing is both (zookeeper.Dial takes its
// session timeout as WithSessionTimeout, like New).
//
// # One name per concept
//
// An option that means the same thing on several engines has the same
// name on each (and its default is Default plus the name's rest):
//
//	concept                                 name                 engines
//	bound on one round trip or statement    WithOpTimeout        redis, mysql, postgres
//	bound on a wait without notification    WithRecheck          redis, zookeeper, consul, etcd
//	key namespace                           WithPrefix           redis, zookeeper, consul, etcd
//	lock table (SQL)                        WithTable            mysql, postgres
//	key to server name and back             EncodeKey, DecodeKey zookeeper, consul
//	connections the engine may open         WithMaxConns         consul, mysql, postgres
//	writers in arrival order                WithFair             redis, consul
//	how long a writer races before queueing WithStarvation       redis, consul
//	lock bound to the server connection     StrategySession      postgres (advisory lock)
//	row lock in an open transaction         StrategyRow          mysql
//	lease rows renewed by the engine        StrategyLease        mysql, postgres
//
// WithRecheck on consul is the wait of each blocking query: the query
// returns when it runs out, and the engine reads the key again, so it is
// the same bound. The SQL engines keep WithTable: it names a table (a
// SQL identifier, plus the tables derived from it) that holds every key
// whole, not a string prepended to keys, and it is refused unless it is a
// valid identifier. The engines that map keys onto names the server
// restricts export the mapping as EncodeKey and DecodeKey; the others
// store keys as they are. How long a silent holder keeps its keys is
// named after the server's own object, because its rules differ:
// zookeeper.WithSessionTimeout (negotiated), consul.WithSessionTTL (within
// Consul's [10s, 24h]), etcd.WithLeaseTTL (whole seconds). A waiter's pause
// between polls is WithBackoff(min, max) on the SQL engines (it grows) and
// redis.WithMaxRetryPause on Redlock (a random pause up to it).
//
// # Writing an engine
//
// An engine package holds its protocol; the frame around it is kit.Base,
// kept in a named field of the engine type (see kit.Base for a skeleton).
// In this list Base, LeaseCore, NewLeaseCore, Signal, ReleaseAll and
// UndoWait are package kit's:
//
//   - Acquire starts with Base.Begin(ctx, e.Validate(req)), or Enter and
//     Exit when Close must wait for the call, so that bad input, a closed
//     engine and an ended context give the same errors in the same order
//     on every engine, before any I/O.
//   - Waits select on Base.Closing, or run under a context from Base.Bind,
//     and return ErrClosed when the engine closes. The clean-up after an
//     ended wait runs with Base.RunUpTo(UndoWait, ...), so that the caller
//     waits for it a bounded time and Close waits for all of it.
//   - A grant becomes a lease through Base.Track, which refuses it with
//     ErrClosed once Close has begun (the engine then gives the grant
//     back). Whatever ends a lease calls Base.Forget, and only a call that
//     gets true closes the lease's Signal (after Base.Shut, Close does).
//   - Each lease type embeds a LeaseCore, made with
//     NewLeaseCore(req.Key, req.Mode, req.OnLost), which gives it Key,
//     Mode, Token (set with SetToken) and, from its Signal, Done and Err;
//     Release closes the Signal with ErrReleased or returns
//     Signal.NotHeld. OnLost therefore runs before Done closes, on every
//     engine.
//   - Close is Base.Shut, then ReleaseAll (every lease given up on the
//     server at once, within a bound, and ended with ErrClosed), then what
//     the protocol keeps (a renewal loop, a session), then Base.Wait for
//     the background clean-ups.
//
// Then run the conformance suite, engine/enginetest, against a real
// server, and the engine's own fault tests.
//
// What an engine still writes itself, besides its protocol: the contract's
// small methods (Name, Limits, Validate, Ping), the arming and stopping of a fixed lease's expiry timer
// (each engine guards the timer with its own lock), and how Close gives
// its leases up on the server.
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
//     key on one engine, across expiry and client restarts. The README's
//     "What a token survives" says, per engine, what else tokens survive
//     (a server's restart or lost writes, a failover, a flush) and which
//     test shows it.
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

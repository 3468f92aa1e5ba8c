// Package cerberus is one distributed-lock API over several lock servers.
//
// A Client hands out leases on named keys:
//
//	c, err := cerberus.New(memory.New())   // or a Redis, ZooKeeper, Consul, etcd, MySQL or PostgreSQL engine
//	l, err := c.Lock(ctx, "order:42")      // waits; ctx's deadline bounds the wait
//	defer l.Unlock(context.WithoutCancel(ctx))
//	// write with l.Token() as the fence; watch l.Done() for loss
//
// Every lease has a fencing Token that strictly increases over successive
// grants of its key, and a Done channel that closes when the lease ends:
// released, expired, lost with its session or connection, or taken away by
// an engine switch. Err says which. A lock service cannot promise that a
// holder still holds its lock by the time its write lands (a GC pause or a
// network delay can outlast any lease), so a resource that must never see
// two writers should reject writes whose token is lower than the last one it
// accepted.
//
// Locks are exclusive (Lock, TryLock, LockAll) or shared (RLock, TryRLock):
// shared leases overlap each other and exclude exclusive ones. Without
// options a lease is renewed automatically until it is unlocked (WithWatchdog
// sets the renewal period, 30 s by default); WithTTL instead grants a fixed
// lease that expires on its own. WithHoldLimit caps how long any lease is
// held, renewed or not: at the limit its Done closes with ErrHoldLimit and
// then the key is released, which frees the key of a holder that hangs
// while its watchdog keeps renewing.
//
// # Reentrancy
//
// A context marked with WithOwner carries an owner. Locks taken with the same
// owner on the same key nest: the inner Lock counts up without a network
// round trip and returns a lease sharing the outer one's token and Done
// channel; the key is released when every nested lease is unlocked. Calls
// whose contexts carry no owner, or different owners, exclude each other
// like sync.Mutex, even in one goroutine. An owner holding a key shared
// cannot re-enter it exclusively (ErrUpgrade): upgrading in place deadlocks
// two readers that both try it.
//
// # Engines
//
// The engines live in subpackages of engine/; the root package knows only
// the contract in package engine. engine/memory is the in-process default,
// for demos and unit tests; it does not lock across processes.
//
// Package failover's Manager is an engine over several engines in
// priority order: it moves to another when the active one fails or an
// operator flips it, ends the leases held on the old one with
// ErrEngineSwitched, and keeps tokens increasing across the switch.
// Package config builds one, with its engines, from a file.
package cerberus

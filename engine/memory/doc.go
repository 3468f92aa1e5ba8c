// Package memory is the in-process engine: the embedded default for the demo
// and for users' unit tests, and the reference the conformance suite is
// proven against.
//
// It is single-process by construction. Engines that share a Store exclude
// each other as clients of one server would, but nothing crosses a process
// boundary, and a crash of the process takes every lock with it. Use a server
// engine (Redis, ZooKeeper, Consul, etcd, MySQL, PostgreSQL) for locks
// between processes.
//
// Semantics: tokens come from one counter per Store, so they strictly
// increase for every key. Leases with Request.Renew never expire (there is no
// separate holder that could crash); fixed-TTL leases expire on a timer.
// Waiters are woken by every change to their key, with no polling. Shared
// mode prefers writers: once a writer waits, new readers wait behind it, as
// with sync.RWMutex, so a stream of readers cannot starve a writer.
//
// Errors: the engine has no server and no access control, so it never
// returns engine.ErrUnavailable or engine.ErrAccessDenied; its tests leave
// the conformance suite's Unreachable and AccessDenied hooks unset.
package memory

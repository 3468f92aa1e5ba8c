package engine

// Optional interfaces. An Engine or a Lease may implement these besides the
// contract; callers find them with a type assertion, as database/sql finds
// driver.Pinger or driver.Validator (InspectorOf, WatcherOf and ListerOf
// also look through a Wrapper; Lister, the operator's inventory, is in
// inventory.go). None of them is needed to pass the conformance
// suite. Inspector and Watcher are for semaphores and elections: the suite
// checks them on every engine that has them.

import (
	"context"
	"time"
)

// Namer is implemented by a Lease that names the engine that granted it,
// when that is not simply the engine it was asked of: a lease of package
// failover's Manager names the engine that was active at the grant.
type Namer interface {
	// EngineName returns the name of the engine that granted the lease.
	EngineName() string
}

// Switcher is implemented by an Engine that stands for several engines,
// one of which serves at a time, such as package failover's Manager.
type Switcher interface {
	// Active returns the name of the engine that serves now.
	Active() string
}

// Wrapper is implemented by an Engine that wraps another, such as the
// engines package config builds, which also own the clients they run on.
type Wrapper interface {
	// Unwrap returns the engine inside, for callers that need its
	// concrete type (such as *redis.Engine).
	Unwrap() Engine
}

// Holder is one lease that holds a key, as Inspector reports it.
type Holder struct {
	// Mode is the mode the lease was granted in.
	Mode Mode
	// Token is the lease's fencing token.
	Token uint64
	// Value is the Request.Value the lease was asked with.
	Value string
}

// Inspector is implemented by an Engine that can list the leases holding a
// key. Semaphores count permits with it and elections read their leader.
type Inspector interface {
	// Holders returns the leases that hold key now, in the order they were
	// granted (ascending Token); none when the key is free. A lease whose
	// period has run out on the server is not listed, even if the server
	// has not yet removed it. It validates key first, wrapping
	// ErrInvalidKey, and reports server failures as *OpError, like Acquire.
	Holders(ctx context.Context, key string) ([]Holder, error)
}

// Watcher is implemented by an Engine whose server can tell when a key's
// holders may have changed (pub/sub, a watch, a blocking query), so that
// an observer need not poll.
type Watcher interface {
	// Watch returns a channel that receives a value soon after the holders
	// of key may have changed (a grant, a release, an expiry the server
	// noticed). Notifications may be coalesced and may be spurious; a
	// missed one is possible when the connection to the server breaks, so
	// callers still re-read on a bounded interval. The channel is closed
	// when ctx ends or the engine closes. It validates key first.
	Watch(ctx context.Context, key string) (<-chan struct{}, error)
}

// InspectorOf returns the Inspector of e, looking through wrappers
// (Wrapper), or nil when e has none.
func InspectorOf(e Engine) Inspector { return lookThrough[Inspector](e) }

// WatcherOf returns the Watcher of e, looking through wrappers (Wrapper),
// or nil when e has none.
func WatcherOf(e Engine) Watcher { return lookThrough[Watcher](e) }

// lookThrough returns e as a T, or the first engine inside e's wrappers
// (Wrapper) that is one, or T's zero value when there is none.
func lookThrough[T any](e Engine) T {
	for e != nil {
		if v, ok := e.(T); ok {
			return v
		}
		w, ok := e.(Wrapper)
		if !ok {
			break
		}
		e = w.Unwrap()
	}
	var zero T
	return zero
}

// NodeCounter is implemented by a lease held on several nodes at once (a
// Redlock engine's): Nodes reports how many of the engine's nodes hold the
// lease now (held) and how many nodes there are (total). held is at least
// a majority while the lease lasts, and 0 once it has ended. A lease with
// held < total is exposed to one more node failure than it need be;
// metrics can watch for it:
//
//	if nc, ok := lease.(engine.NodeCounter); ok {
//		held, total := nc.Nodes()
//		gauge.Set(float64(total - held))
//	}
type NodeCounter interface {
	Nodes() (held, total int)
}

// RenewalReporter is implemented by an Engine that renews its leases in
// rounds and can say how close its renewal runs to losing them: the Redis
// engine (single, Sentinel, Cluster; not Redlock) and the lease-row
// strategies of MySQL and PostgreSQL. Engines whose server keeps a
// session alive (ZooKeeper, Consul, etcd, the session strategies) and the
// memory engine have no rounds to report.
type RenewalReporter interface {
	// RenewalSlack returns the room the last renewal round left the lease
	// with the least of it: how long before that lease's validity ends its
	// next renewal would land if it took as long as the last round did.
	// Negative means the lease is at risk of expiring before its renewal
	// lands (the engine then refuses new grants); 0 follows a round in
	// which a renewal went unanswered. ok is false while the engine renews
	// no lease.
	RenewalSlack() (slack time.Duration, ok bool)
}

// RenewalReporterOf returns the RenewalReporter of e, looking through
// wrappers (Wrapper), or nil when e has none.
func RenewalReporterOf(e Engine) RenewalReporter { return lookThrough[RenewalReporter](e) }

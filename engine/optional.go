package engine

// Optional interfaces. An Engine or a Lease may implement these besides the
// contract; callers find them with a type assertion, as database/sql finds
// driver.Pinger or driver.Validator. None of them is needed to pass the
// conformance suite.

// Namer is implemented by a Lease that names the engine that granted it,
// when that is not simply the engine it was asked of: a lease of the root
// package's Failover names the engine that was active at the grant.
type Namer interface {
	// EngineName returns the name of the engine that granted the lease.
	EngineName() string
}

// Switcher is implemented by an Engine that stands for several engines,
// one of which serves at a time, such as the root package's Failover.
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

package etcd

import "time"

// DefaultPrefix is where queue entries live unless WithPrefix says
// otherwise.
const DefaultPrefix = "/cerberus/locks/"

// DefaultLeaseTTL is the period of the engine's etcd lease unless
// WithLeaseTTL says otherwise: how long a holder that stops talking keeps
// its keys.
const DefaultLeaseTTL = 10 * time.Second

// DefaultRecheck bounds how long a waiter trusts its watch before it reads
// the queue again.
const DefaultRecheck = 10 * time.Second

// Option configures an Engine.
type Option func(*config)

type config struct {
	prefix   string
	leaseTTL time.Duration
	recheck  time.Duration
}

func defaults() config {
	return config{prefix: DefaultPrefix, leaseTTL: DefaultLeaseTTL, recheck: DefaultRecheck}
}

// WithPrefix sets the etcd key prefix under which every lock key's queue
// lives. It must not be empty. The default is DefaultPrefix
// ("/cerberus/locks/").
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithLeaseTTL sets the period of the engine's etcd lease, rounded up to
// whole seconds (etcd counts in seconds, and the server may raise a short
// period to its own minimum, about 2s with default settings). Every key the
// engine holds or waits with is attached to that lease. It must be at least
// one second. The default is DefaultLeaseTTL (10s).
func WithLeaseTTL(d time.Duration) Option { return func(c *config) { c.leaseTTL = d } }

// WithRecheck sets how long a waiter waits for its watch before it reads
// the queue again, so a lost notification costs a delay, never a hang. The
// default is DefaultRecheck (10s).
func WithRecheck(d time.Duration) Option { return func(c *config) { c.recheck = d } }

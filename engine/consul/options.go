package consul

import (
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/consul/api"
)

// Option configures an Engine.
type Option func(*config)

// config is the engine's settings after the options ran.
type config struct {
	prefix        string
	sessionTTL    time.Duration
	lockDelay     time.Duration
	recheck       time.Duration
	owner         string
	token         string
	datacenter    string
	checksSet     bool
	nodeChecks    []string
	serviceChecks []api.ServiceCheck
	sessionName   string
	tls           *api.TLSConfig
	fair          bool
	starve        time.Duration
	maxConns      int
}

// Defaults.
const (
	// DefaultPrefix is the KV folder the engine keeps its locks under.
	DefaultPrefix = "cerberus/locks"
	// DefaultSessionTTL is the TTL of the engine's Consul session:
	// Consul's minimum, so that the engine's Floor is as low as it can be.
	DefaultSessionTTL = 10 * time.Second
	// DefaultLockDelay is the session's lock-delay. Consul's own default is
	// 15s; 10s keeps the engine's Floor (2 x TTL + lock-delay) at 30s, the
	// default watchdog period.
	DefaultLockDelay = 10 * time.Second
	// DefaultMaxConns is the default of WithMaxConns: a few engines on one
	// host stay below the agent's default limit of 200 concurrent
	// connections per client address.
	DefaultMaxConns = 64
	// DefaultRecheck bounds each blocking query of a waiting Acquire.
	DefaultRecheck = 5 * time.Second
	// DefaultStarvation is the default of WithStarvation.
	DefaultStarvation = 20 * time.Millisecond
	// DefaultSessionName is the default of WithSessionName.
	DefaultSessionName = "cerberus"
)

func defaults() config {
	host, _ := os.Hostname()
	return config{
		prefix:      DefaultPrefix,
		sessionTTL:  DefaultSessionTTL,
		lockDelay:   DefaultLockDelay,
		recheck:     DefaultRecheck,
		owner:       fmt.Sprintf("%s:%d", host, os.Getpid()),
		sessionName: DefaultSessionName,
		maxConns:    DefaultMaxConns,
		starve:      DefaultStarvation,
	}
}

// WithMaxConns caps the HTTP connections to the agent of an engine made by
// Dial; further requests wait (cancellably) for one to come free instead of
// running into the agent's per-client limit (limits.http_max_conns_per_client,
// 200 by default), which answers 429. The limit counts every process on a
// host together: size n so that the engines of one host stay under it. A
// waiting Acquire holds one connection for its blocking query, but only one
// waiter per key and engine does, so n also bounds how many keys an engine
// can wait on at once without delaying other requests. Queued waiters (fair
// mode, or a starving writer in the default mode) each hold their own. New
// uses the caller's client as it is: configure its transport likewise. The
// default is DefaultMaxConns.
func WithMaxConns(n int) Option { return func(c *config) { c.maxConns = n } }

// WithPrefix sets the KV folder that holds the locks, such as
// "myapp/locks". It must be made of ASCII letters, digits, '-', '_', '.'
// and '/' separators, without empty, "." or ".." segments. The default is
// DefaultPrefix.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithSessionTTL sets the TTL of the engine's Consul session, between 10s
// and 24h (Consul's bounds). The engine renews the session every TTL/2. A
// holder that crashes keeps its keys until Consul invalidates the session:
// after the TTL (Consul may wait up to twice the TTL) plus the lock-delay.
// A fixed Request.TTL does not shorten this, so lease periods below the
// engine's Floor (2 x TTL + lock-delay) are refused. The default is
// DefaultSessionTTL, 10s.
func WithSessionTTL(ttl time.Duration) Option { return func(c *config) { c.sessionTTL = ttl } }

// WithLockDelay sets the session's lock-delay, between 0 and 60s. After
// Consul invalidates a session (TTL ran out, a tied health check failed, or
// someone destroyed it), the keys it held cannot be locked again for this
// long. That is the safety margin for a holder that has not yet noticed its
// loss: it gets the lock-delay to stop writing before another holder can
// start. Zero turns the margin off: a new holder may overlap a partitioned
// old one. Releases, expiry of a fixed TTL and Close delete the keys
// explicitly, so the lock-delay only applies to invalidated sessions. It
// adds to the engine's Floor. The default is DefaultLockDelay, 10s.
func WithLockDelay(d time.Duration) Option { return func(c *config) { c.lockDelay = d } }

// WithRecheck bounds how long a waiter trusts a notification it has not
// had: it is the wait of each blocking query a waiting Acquire (and Watch)
// makes, after which the engine checks the key again even if Consul
// reported no change, so a missed change costs at most this delay. It must
// be within [10ms, 10m]. The default is DefaultRecheck.
func WithRecheck(d time.Duration) Option { return func(c *config) { c.recheck = d } }

// WithHolderLabel sets the label recorded as the holder (the Owner field)
// in the value of every key the engine holds, for operators reading the KV
// store. It is only a label: reentrancy follows cerberus.WithOwner. The
// default is "hostname:pid".
func WithHolderLabel(label string) Option { return func(c *config) { c.owner = label } }

// WithToken sets the ACL token sent with every request, overriding the
// client's own. The token is sent in a header and never appears in errors
// or logs. The default is the client's token.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithDatacenter sets the datacenter every request goes to. The default is
// the client's datacenter (normally the agent's own).
func WithDatacenter(dc string) Option { return func(c *config) { c.datacenter = dc } }

// WithHealthChecks ties the engine's session to health checks: when any of
// them turns critical, Consul invalidates the session and every lease it
// backs is lost. nodeChecks are check IDs on the agent's node (include
// "serfHealth" to keep Consul's default); serviceChecks are service-level
// checks. The default is Consul's: the node's serfHealth check only.
func WithHealthChecks(nodeChecks []string, serviceChecks ...api.ServiceCheck) Option {
	return func(c *config) {
		c.checksSet = true
		c.nodeChecks = append([]string{}, nodeChecks...)
		c.serviceChecks = append([]api.ServiceCheck{}, serviceChecks...)
	}
}

// WithSessionName sets the name of the engine's session, shown in Consul's
// UI and API. The default is DefaultSessionName.
func WithSessionName(name string) Option { return func(c *config) { c.sessionName = name } }

// check validates the settings.
func (c *config) check() error {
	if err := checkPrefix(c.prefix); err != nil {
		return err
	}
	if c.sessionTTL < 10*time.Second || c.sessionTTL > 24*time.Hour {
		return fmt.Errorf("consul: session TTL %v is outside Consul's [10s, 24h]", c.sessionTTL)
	}
	if c.lockDelay < 0 || c.lockDelay > 60*time.Second {
		return fmt.Errorf("consul: lock-delay %v is outside [0, 60s]", c.lockDelay)
	}
	if c.starve < 0 || c.starve > time.Minute {
		return fmt.Errorf("consul: starvation threshold %v is outside [0, 1m]", c.starve)
	}
	if c.recheck < 10*time.Millisecond || c.recheck > 10*time.Minute {
		return fmt.Errorf("consul: recheck %v is outside [10ms, 10m]", c.recheck)
	}
	return nil
}

// WithTLS makes Dial talk HTTPS with cfg (CA, client certificate, server
// name). New ignores it: the client passed to New carries its own TLS
// settings. The default is plain HTTP.
func WithTLS(cfg api.TLSConfig) Option {
	return func(c *config) { t := cfg; c.tls = &t }
}

// WithFair turns fair mode on or off. In fair mode a waiting Acquire joins
// the key's queue (a waiter key held with the session; its CreateIndex is
// its place) and is granted in arrival order: a writer when everyone
// queued before it has gone, an uncounted reader when no writer is queued
// before it, a counted reader (Request.Limit) when no writer is queued
// before it and there is a permit for it and each waiter before it. Single
// attempts (Request.Wait false) fail while someone they would overtake is
// queued. The default is off: writers race after each release, which costs
// fewer writes when there is little contention, until one starves (see
// WithStarvation).
func WithFair(on bool) Option { return func(c *config) { c.fair = on } }

// WithStarvation bounds how long a writer in the default (unordered) mode
// races for a key before it joins the key's queue, as in fair mode. While
// anyone queues, a writer's first attempt fails (its transaction checks
// that the queue marker P/E/queue is absent) and a waiting writer queues
// too, so the key goes in arrival order until the queue drains; then
// writers race again. As in Go's sync.Mutex, this bounds the wait of an
// unlucky writer without the cost of queueing when contention is light.
// Counted readers (Request.Limit) starve and queue as writers do;
// uncounted readers in the default mode do not queue. Each queued writer
// holds a blocking query, so an engine queues at most half of WithMaxConns
// writers at once; the others keep racing, or poll while the queue lasts. 0 turns
// it off: writers race however long they wait. The default is
// DefaultStarvation; at most a minute.
func WithStarvation(d time.Duration) Option { return func(c *config) { c.starve = d } }

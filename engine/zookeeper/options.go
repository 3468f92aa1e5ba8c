package zookeeper

import (
	"time"

	"github.com/go-zookeeper/zk"
)

// DefaultPrefix is the base znode under which lock nodes live unless
// WithPrefix says otherwise.
const DefaultPrefix = "/cerberus/locks"

// DefaultSessionTimeout is the default WithSessionTimeout: the shortest
// timeout a server with the default tickTime of 2s negotiates.
const DefaultSessionTimeout = 4 * time.Second

// DefaultRecheck bounds how long a waiter trusts its watch before it lists
// the queue again.
const DefaultRecheck = 10 * time.Second

// Option configures an Engine.
type Option func(*config)

type config struct {
	base           string
	chroot         string
	user, password string
	digest         bool
	sessionTimeout time.Duration
	recheck        time.Duration
	logger         zk.Logger
	hooks          *hooks // tests only
}

func defaults() config {
	return config{base: DefaultPrefix, recheck: DefaultRecheck, sessionTimeout: DefaultSessionTimeout}
}

// WithPrefix sets the key namespace: the base znode under which every
// key's lock node is created. It must be an absolute ZooKeeper path
// without a trailing slash. The default
// is DefaultPrefix ("/cerberus/locks"). The nodes on the path are created
// as persistent nodes, open to everyone, when first needed.
func WithPrefix(path string) Option { return func(c *config) { c.base = path } }

// WithChroot puts every path the engine uses under chroot, as a chroot
// suffix in a ZooKeeper connect string would ("/app" makes the default base
// "/app/cerberus/locks"). go-zookeeper has no chroot of its own; the engine
// prefixes its paths. The default is no chroot.
func WithChroot(chroot string) Option { return func(c *config) { c.chroot = chroot } }

// WithDigest protects lock nodes with a digest ACL: the key's lock node and
// the queue nodes under it grant every permission to user:password and only
// READ to anyone else, so a client without these credentials can neither
// delete a holder's node nor queue on the key. With Dial the engine adds the
// credentials to its connection; with New the caller must have called
// AddAuth("digest", "user:password") on the connection. The default is no
// ACL (world:anyone has every permission).
func WithDigest(user, password string) Option {
	return func(c *config) { c.user, c.password, c.digest = user, password, true }
}

// WithSessionTimeout sets the session timeout. Dial asks the servers for
// it; an engine built by New is told with it the timeout of the connection
// it was given, which it needs for its local session timer: give the
// negotiated timeout or less there, since a longer one would let a lease
// outlive its session. It must be positive. The default is
// DefaultSessionTimeout (4s).
func WithSessionTimeout(d time.Duration) Option { return func(c *config) { c.sessionTimeout = d } }

// WithRecheck sets how long a waiter waits for its watch before it lists
// the queue again, so a lost notification costs a delay, never a hang. The
// default is DefaultRecheck (10s).
func WithRecheck(d time.Duration) Option { return func(c *config) { c.recheck = d } }

// WithLogger sets where the connection made by Dial logs. The default
// discards go-zookeeper's log lines.
func WithLogger(l zk.Logger) Option { return func(c *config) { c.logger = l } }

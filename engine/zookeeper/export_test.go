package zookeeper

// NodeEvents returns how many watch notifications the engine's connection
// has delivered.
func (e *Engine) NodeEvents() int64 { return e.nodeEvents.Load() }

// Listings returns how many times the engine listed a queue.
func (e *Engine) Listings() int64 { return e.listings.Load() }

// ExistsCalls returns how many czxids the engine asked for with Exists.
func (e *Engine) ExistsCalls() int64 { return e.existsCalls.Load() }

// WithHooks installs callbacks: queued is called with each queue node
// created, watching with each node a waiter watches, session with each
// change of the session (true: up). Any may be nil; none may block.
func WithHooks(queued, watching func(path string), session func(up bool)) Option {
	return func(c *config) { c.hooks = &hooks{queued: queued, watching: watching, session: session} }
}

// Prefix returns the chroot and base path the engine uses.
func (e *Engine) Prefix() string { return e.base }

// SessionID returns the id of the connection's current session.
func (e *Engine) SessionID() int64 { return e.conn.SessionID() }

// Pokes returns how many counted grants poked the reader behind them.
func (e *Engine) Pokes() int64 { return e.pokes.Load() }

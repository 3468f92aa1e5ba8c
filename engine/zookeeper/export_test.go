package zookeeper

// NodeEvents returns how many watch notifications the engine's connection
// has delivered.
func (e *Engine) NodeEvents() int64 { return e.nodeEvents.Load() }

// MarkHits returns how many tokens the engine read off a lock node's pzxid
// instead of asking for the queue node's czxid.
func (e *Engine) MarkHits() int64 { return e.markHits.Load() }

// WithHooks installs callbacks: queued is called with each queue node
// created, watching with each node a waiter watches, session with each
// change of the session (true: up). Any may be nil; none may block.
func WithHooks(queued, watching func(path string), session func(up bool)) Option {
	return func(c *config) { c.hooks = &hooks{queued: queued, watching: watching, session: session} }
}

// BasePath returns the chroot and base path the engine uses.
func (e *Engine) BasePath() string { return e.base }

// SessionID returns the id of the connection's current session.
func (e *Engine) SessionID() int64 { return e.conn.SessionID() }

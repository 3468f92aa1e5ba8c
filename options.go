package cerberus

import "time"

// DefaultWatchdog is the lease period of renewed leases when no option sets
// one: a crashed holder keeps its key at most this long.
const DefaultWatchdog = 30 * time.Second

// Option tunes a Client (given to New, it sets the default for every call)
// or a single call (given to Lock and friends, it overrides the default).
type Option func(*settings)

type settings struct {
	ttl      time.Duration
	renew    bool
	observer Observer
}

func defaultSettings() settings { return settings{ttl: DefaultWatchdog, renew: true} }

func (s settings) with(opts []Option) settings {
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	return s
}

// WithTTL grants a fixed lease that expires d after the grant unless it is
// unlocked first; it is never renewed. Where the server expires leases on
// its own clock (Redis, MySQL's lease strategy), Done closes a little
// earlier, engine.Margin(d) before d, so that the holder stops before the
// server can grant the key to anyone else. The default is automatic renewal
// (see WithWatchdog).
func WithTTL(d time.Duration) Option {
	return func(s *settings) { s.ttl, s.renew = d, false }
}

// WithWatchdog keeps the lease alive until Unlock by renewing it well
// before its period d runs out; if the holder dies, the key frees itself
// within d. This is the default, with d = DefaultWatchdog (30 s).
func WithWatchdog(d time.Duration) Option {
	return func(s *settings) { s.ttl, s.renew = d, true }
}

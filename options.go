package cerberus

import (
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// DefaultWatchdog is the lease period of renewed leases when no option sets
// one: a crashed holder keeps its key at most this long.
const DefaultWatchdog = 30 * time.Second

// Option tunes a Client (given to New, it sets the default for every call)
// or a single call (given to Lock and friends, it overrides the default).
type Option func(*settings)

type settings struct {
	ttl       time.Duration
	renew     bool
	holdLimit time.Duration // 0: none
	observer  Observer
}

func defaultSettings() settings { return settings{ttl: DefaultWatchdog, renew: true} }

// check refuses settings no engine can act on; the engine checks the rest.
func (s settings) check() error {
	if s.holdLimit != 0 && (s.holdLimit < engine.MinTTL || s.holdLimit > engine.MaxTTL) {
		return fmt.Errorf("%w: hold limit %v: want 0 (none) or within [%v, %v]", ErrInvalidTTL, s.holdLimit,
			engine.MinTTL, engine.MaxTTL)
	}
	return nil
}

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

// WithHoldLimit ends the lease d after its grant even while its watchdog
// renews it: the way to free the key of a holder that hangs without dying.
// When d runs out, Done closes first, with Err wrapping ErrHoldLimit (and so
// ErrLeaseLost), and only then is the key released on the server, so the
// holder is told before anyone else can be granted the key. The limit is
// kept by the client's own timer, not by the server: it may be shorter or
// longer than the lease period, and it works with WithTTL too (whichever
// ends first ends the lease). A nested lease of an owner shares its outer
// lease's hold, whose limit counts from the first grant; each key of
// LockAll counts from its own grant. d must be 0 or within
// [engine.MinTTL, engine.MaxTTL], else calls return ErrInvalidTTL before
// any I/O. The default is 0: no limit; given to a call, WithHoldLimit(0)
// lifts a limit the Client's defaults set.
func WithHoldLimit(d time.Duration) Option {
	return func(s *settings) { s.holdLimit = d }
}

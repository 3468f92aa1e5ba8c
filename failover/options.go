package failover

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// Options tune a Manager. The zero value is usable: manual switching
// only, no fence, health checked every second.
type Options struct {
	// Active names the engine to use (config: the key engine). Empty or
	// unknown: the first engine in order, and with Auto the first healthy
	// one.
	Active string
	// Interval is how often every engine is pinged. The default is
	// DefaultInterval (1s).
	Interval time.Duration
	// Threshold is how many failed pings in a row mark an engine down. The
	// default is DefaultThreshold (3).
	Threshold int
	// Auto moves to the next healthy engine, in order, when the active one
	// is down. The default is off: only SetActive switches.
	Auto bool
	// Failback moves back to a healthy engine earlier in the order when one
	// recovers. The default is off, so the manager does not flap.
	Failback bool
	// Fence delays the first grant on a newly active engine until every
	// lease granted on the old one must have expired (the longest lease TTL
	// granted in the old epoch, or the old engine's Limits().Floor if that
	// is longer, counted from the switch), so two holders never overlap
	// even if the old engine is unreachable and its holders have not
	// noticed. The default is off.
	Fence bool
	// MinFence, with Fence, is the shortest fence after a switch, however
	// short the leases this process granted: the lease period of the other
	// processes of a fleet, whose leases this one cannot see. The default,
	// 0, fences by this process's own leases only.
	MinFence time.Duration
	// Epoch is the first epoch; see Tokens across a switch in the package
	// documentation. Give every process of a fleet the same value (config
	// does).
	Epoch uint64
	// OnSwitch, if set, is called after every switch. It must not block.
	OnSwitch func(SwitchEvent)
	// Switch, if set, is how a switch asked of the Handler moves the fleet
	// (package config sets it when an engine key is configured): it moves
	// every process to name and waits up to wait for them to follow. Nil
	// means SetActive: this process only.
	Switch func(ctx context.Context, name string, wait time.Duration) (SwitchReport, error)
	// OnHealth, if set, is called after every health round in which an
	// engine became healthy or unhealthy, with the new status (as Status
	// returns it). It must not block.
	OnHealth func([]EngineStatus)
	// OnRelease, if set, is called after every force release
	// (ReleaseOn, ForceRelease, a release through the Handler), as
	// metrics.Metrics.ForceReleased counts them. It must not block.
	OnRelease func(ReleaseEvent)
	// Caller, if set, names who sent a request to the Handler, for the
	// log of a force release: the user the service's authentication
	// found, say. The default is the request's remote address.
	Caller func(*http.Request) string
	// Logger receives the Manager's log of operator actions (a force
	// release, at Warn). The default is slog.Default().
	Logger *slog.Logger
}

// Defaults of Options: what a zero Interval or Threshold means.
const (
	// DefaultInterval is how often a Manager pings every engine.
	DefaultInterval = time.Second
	// DefaultThreshold is how many failed pings in a row mark an engine
	// down.
	DefaultThreshold = 3
)

// withDefaults returns o with a zero Interval or Threshold set to its
// default.
func (o Options) withDefaults() Options {
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Threshold == 0 {
		o.Threshold = DefaultThreshold
	}
	return o
}

// Configure applies new tunables without a restart, as a configuration
// reload does: Interval, Threshold, Auto, Failback and Fence take effect
// from the next health round, MinFence from the next switch; a changed
// Active is applied as SetActive would (an empty one clears the
// override); an Epoch above the current one raises it, so that every
// later token is larger (an operator can bring a fleet's epochs back in
// step this way); a lower Epoch is ignored, since tokens must not go
// back. OnSwitch, OnHealth, OnRelease, Caller and Logger stay as New set
// them. An unknown Active clears the override, as an unknown one at start does, and
// Configure returns ErrUnknownEngine after applying the rest.
func (m *Manager) Configure(opts Options) error {
	opts = opts.withDefaults()
	if opts.Interval < 0 || opts.Threshold < 0 || opts.Epoch >= 1<<(64-tokenBits) {
		return fmt.Errorf("%w: failover: interval %v, threshold %d, epoch %d", engine.ErrInvalidRequest,
			opts.Interval, opts.Threshold, opts.Epoch)
	}
	m.mu.Lock()
	m.opts.Interval, m.opts.Threshold = opts.Interval, opts.Threshold
	m.opts.Auto, m.opts.Failback, m.opts.Fence = opts.Auto, opts.Failback, opts.Fence
	m.opts.MinFence = opts.MinFence
	if opts.Epoch > m.epoch {
		m.epoch = opts.Epoch
	}
	changed := opts.Active != m.override
	m.mu.Unlock()
	if !changed {
		return nil
	}
	if err := m.SetActive(opts.Active); err != nil {
		_ = m.SetActive("")
		return err
	}
	return nil
}

package cerberus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// NamedEngine is one engine of a Failover, in priority order.
type NamedEngine struct {
	Name   string
	Engine engine.Engine
}

// Defaults of FailoverOptions: what a zero Interval or Threshold means.
const (
	// DefaultInterval is how often a Failover pings every engine.
	DefaultInterval = time.Second
	// DefaultThreshold is how many failed pings in a row mark an engine
	// down.
	DefaultThreshold = 3
)

// withDefaults returns o with a zero Interval or Threshold set to its
// default.
func (o FailoverOptions) withDefaults() FailoverOptions {
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Threshold == 0 {
		o.Threshold = DefaultThreshold
	}
	return o
}

// FailoverOptions tune a Failover. The zero value is usable: manual
// switching only, no fence, health checked every second.
type FailoverOptions struct {
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
	// Epoch is the first epoch; see Failover. Give every process of a fleet
	// the same value (config does).
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
}

// SwitchEvent describes one switch of the active engine.
type SwitchEvent struct {
	From, To   string // engine names; From is "" for none
	Epoch      uint64 // the new epoch
	Reason     string // "operator", "failover" or "failback"
	LostLeases int    // leases ended with ErrEngineSwitched
	FenceUntil time.Time
}

// EngineStatus is one engine's health as the manager last saw it.
type EngineStatus struct {
	Name     string
	Active   bool
	Healthy  bool
	Failures int           // failed pings in a row
	Latency  time.Duration // of the last successful ping
	LastErr  string        // of the last failed ping
}

// tokenBits is how many low bits of a token the engine's own token may
// use; the epoch sits above them.
const tokenBits = 48

// ErrUnknownEngine: SetActive named an engine the Failover does not have.
var ErrUnknownEngine = errors.New("cerberus: unknown engine")

// Failover is an engine.Engine over several engines in priority order: it
// dispatches to the active one, pings all of them, and moves to another on
// an operator's SetActive or, with Auto, when the active engine is down.
// Give it to New like any engine; the Client's reentrancy and LockAll work
// unchanged.
//
// A switch loses the locks held on the old engine, and says so: every
// lease granted there closes Done with ErrEngineSwitched at once (Unlock
// then returns ErrNotHeld), and is released on the old engine in the
// background where that engine still answers. Waiters move to the new
// engine. With Fence, the first grant on the new engine waits until the
// old leases must have expired.
//
// # Detection
//
// Health rounds run on a fixed schedule, one every Interval from start to
// start, and each waits for its pings at most 9/10 of Interval, whatever
// a client library's own retries do (a ping still running then counts as
// failed). So an engine that stops answering is marked down within
// Interval x Threshold of its failure. Calls on real traffic count too:
// an Acquire, Release or renewal on the active engine that fails with
// ErrUnavailable (while its caller's context is live) starts a quick probe
// at once: the active engine is pinged, and again every
// QuickProbeSpacing, until it answers or has failed Threshold times in a
// row. A busy service thus notices an outage in about one round trip plus
// (Threshold-1) x QuickProbeSpacing; one failed call on a healthy engine
// costs one ping and changes nothing.
//
// # Tokens across a switch
//
// Every switch increments the epoch, and a lease's Token is epoch<<48 |
// the engine's token. So a resource that fences on Token sees every grant
// of the new epoch above every grant of the old one, whichever engines
// issued them. Engine tokens must fit in 48 bits (a grant whose token does
// not is refused and released); every cerberus engine's does in practice
// (ZooKeeper's czxid carries the ensemble epoch in its high 32 bits, which
// would need 2^16 leader elections to overflow; Redis tokens follow the
// server's clock in 8µs units from 2025, which fit in 48 bits until about
// 2096).
//
// Epochs are per process. Processes that switch together (an operator's
// flip through shared configuration, Epoch set alike) keep equal epochs.
// A process that has not switched yet keeps the lower epoch: a fenced
// resource refuses its writes once a switched process has written, which
// is safe. A process that switched more often than the others (say, away
// and back on a flapping health check) gets a higher epoch, and its
// writes then shut out the others' until they switch too: safe, but a
// loss of availability; keep Failback off and give every process the
// same configuration.
type Failover struct {
	engines []NamedEngine
	opts    FailoverOptions

	mu         sync.Mutex
	active     int
	epoch      uint64
	health     []EngineStatus
	leases     map[*failoverLease]struct{}
	waiters    map[*context.CancelCauseFunc]struct{}
	maxTTL     time.Duration // longest TTL granted in this epoch
	fenceUntil time.Time
	override   string
	fleet      FleetStatus
	suspect    chan struct{} // real traffic saw the active engine unavailable
	pinging    []atomic.Bool // a ping of engines[i] is under way
	closed     bool
	closing    chan struct{}
	loopDone   chan struct{}
	bg         sync.WaitGroup // background releases on old engines
}

// A Failover is an engine.Engine, and an engine.Switcher: observers name
// its active engine. Its leases are engine.Namers: they name the engine that
// granted them.
var (
	_ engine.Engine   = (*Failover)(nil)
	_ engine.Switcher = (*Failover)(nil)
	_ engine.Namer    = (*failoverLease)(nil)
)

// errSwitched cancels a wait on an engine that is no longer active.
var errSwitched = errors.New("cerberus: active engine changed")

// NewFailover returns a Failover over engines, which it owns: Close closes
// them. It does no I/O; the health loop starts now.
func NewFailover(engines []NamedEngine, opts FailoverOptions) (*Failover, error) {
	if len(engines) == 0 {
		return nil, fmt.Errorf("%w: failover needs at least one engine", engine.ErrInvalidRequest)
	}
	seen := map[string]bool{}
	for i, ne := range engines {
		switch {
		case ne.Name == "":
			return nil, fmt.Errorf("%w: engines[%d]: empty name", engine.ErrInvalidRequest, i)
		case seen[ne.Name]:
			return nil, fmt.Errorf("%w: engines[%d]: duplicate name %q", engine.ErrInvalidRequest, i,
				ne.Name)
		case ne.Engine == nil:
			return nil, fmt.Errorf("%w: engines[%d] (%s): nil engine", engine.ErrInvalidRequest, i, ne.Name)
		}
		seen[ne.Name] = true
	}
	opts = opts.withDefaults()
	if opts.Interval < 0 || opts.Threshold < 0 {
		return nil, fmt.Errorf("%w: failover: interval %v and threshold %d must be positive",
			engine.ErrInvalidRequest, opts.Interval, opts.Threshold)
	}
	if opts.Epoch >= 1<<(64-tokenBits) {
		return nil, fmt.Errorf("%w: failover: epoch %d does not fit in %d bits", engine.ErrInvalidRequest,
			opts.Epoch, 64-tokenBits)
	}
	f := &Failover{
		engines: engines, opts: opts, epoch: opts.Epoch,
		health:   make([]EngineStatus, len(engines)),
		leases:   make(map[*failoverLease]struct{}),
		waiters:  make(map[*context.CancelCauseFunc]struct{}),
		override: opts.Active,
		suspect:  make(chan struct{}, 1),
		pinging:  make([]atomic.Bool, len(engines)),
		closing:  make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	for i, ne := range engines {
		f.health[i] = EngineStatus{Name: ne.Name, Healthy: true}
		if ne.Name == opts.Active {
			f.active = i
		}
	}
	go f.healthLoop()
	return f, nil
}

// Name returns "failover".
func (f *Failover) Name() string { return "failover" }

// Limits are the narrowest of every engine's, so that a request valid now
// stays valid after a switch.
func (f *Failover) Limits() engine.Limits {
	lim := f.engines[0].Engine.Limits()
	for _, ne := range f.engines[1:] {
		l := ne.Engine.Limits()
		lim.MaxKeyLen = min(lim.MaxKeyLen, l.MaxKeyLen)
		lim.MinTTL = max(lim.MinTTL, l.MinTTL)
		lim.MaxTTL = min(lim.MaxTTL, l.MaxTTL)
		lim.Floor = max(lim.Floor, l.Floor)
		lim.Counted = lim.Counted && l.Counted
	}
	return lim
}

// Validate checks req against every engine, without I/O.
func (f *Failover) Validate(req engine.Request) error {
	for _, ne := range f.engines {
		if err := ne.Engine.Validate(req); err != nil {
			return err
		}
	}
	return nil
}

// Ping pings the active engine.
func (f *Failover) Ping(ctx context.Context) error {
	e, _, err := f.current()
	if err != nil {
		return err
	}
	return e.Ping(ctx)
}

// Active returns the name of the active engine (engine.Switcher).
func (f *Failover) Active() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.engines[f.active].Name
}

// Epoch returns the current epoch: the top 16 bits of every token granted
// now.
func (f *Failover) Epoch() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

// Status returns every engine's health, in priority order.
func (f *Failover) Status() []EngineStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := append([]EngineStatus(nil), f.health...)
	out[f.active].Active = true
	return out
}

// SetActive makes name the active engine, as an operator's flip does, and
// keeps it as the override (see FailoverOptions.Active). An empty name
// clears the override without switching. An unknown name returns
// ErrUnknownEngine and changes nothing.
//
// SetActive moves this process only. Processes of a fleet that switch one
// by one grant the same keys on two engines in between; a fleet switches
// together through a shared key (package config's engine_key), whose
// followers call Follow.
func (f *Failover) SetActive(name string) error {
	if name == "" {
		f.mu.Lock()
		f.override = ""
		f.mu.Unlock()
		return nil
	}
	for i, ne := range f.engines {
		if ne.Name == name {
			f.mu.Lock()
			f.override = name
			f.mu.Unlock()
			f.switchTo(i, "operator", 0)
			return nil
		}
	}
	return fmt.Errorf("%w: %q", ErrUnknownEngine, name)
}

// Follow makes name the active engine at epoch at least epoch, as a
// fleet's shared decision says (package config's engine_key calls it for
// every process of the fleet), and keeps name as the override. If name is
// active already, a higher epoch is taken without a switch, so that every
// later token is larger. A switch takes max(epoch, the current epoch + 1):
// epochs never go back, so a process that had switched more often than
// the fleet keeps its higher epoch. reason is reported in the SwitchEvent.
// An unknown name returns ErrUnknownEngine and changes nothing.
func (f *Failover) Follow(name string, epoch uint64, reason string) error {
	for i, ne := range f.engines {
		if ne.Name != name {
			continue
		}
		if epoch >= 1<<(64-tokenBits) {
			return fmt.Errorf("%w: failover: epoch %d does not fit in %d bits", engine.ErrInvalidRequest,
				epoch, 64-tokenBits)
		}
		f.mu.Lock()
		f.override = name
		if f.active == i && epoch > f.epoch {
			f.epoch = epoch
		}
		f.mu.Unlock()
		f.switchTo(i, reason, epoch)
		return nil
	}
	return fmt.Errorf("%w: %q", ErrUnknownEngine, name)
}

func (f *Failover) current() (engine.Engine, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, 0, engine.ErrClosed
	}
	return f.engines[f.active].Engine, f.active, nil
}

// Acquire grants a lease on the active engine; see engine.Engine. A wait
// that outlives a switch carries on on the new engine.
func (f *Failover) Acquire(ctx context.Context, req engine.Request) (engine.Lease, error) {
	if err := f.Validate(req); err != nil {
		return nil, err
	}
	for {
		l, err := f.attempt(ctx, req)
		if errors.Is(err, errSwitched) && req.Wait && ctx.Err() == nil {
			continue
		}
		if errors.Is(err, errSwitched) {
			return nil, fmt.Errorf("%w: the active engine changed during the attempt", engine.ErrNotAcquired)
		}
		return l, err
	}
}

func (f *Failover) attempt(ctx context.Context, req engine.Request) (engine.Lease, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, engine.ErrClosed
	}
	idx, epoch, fence := f.active, f.epoch, f.fenceUntil
	actx, cancel := context.WithCancelCause(ctx)
	f.waiters[&cancel] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.waiters, &cancel)
		f.mu.Unlock()
		cancel(nil)
	}()

	if err := f.waitFence(ctx, actx, req, fence, idx); err != nil {
		return nil, err
	}
	fl := &failoverLease{f: f, epoch: epoch, engine: f.engines[idx].Name,
		sig: engine.NewSignal(req.OnLost)}
	inner := req
	inner.OnLost = fl.innerLost
	l, err := f.engines[idx].Engine.Acquire(actx, inner)
	if err != nil {
		if cause := context.Cause(actx); ctx.Err() == nil &&
			(errors.Is(cause, errSwitched) || errors.Is(cause, engine.ErrClosed)) {
			return nil, cause // a switch, or Close, ended the wait
		}
		f.noteFailure(actx, err)
		return nil, err
	}
	fl.inner = l
	if l.Token() >= 1<<tokenBits {
		f.releaseLater(l)
		return nil, &engine.OpError{Engine: f.engines[idx].Name, Op: "acquire", Key: req.Key,
			Err: fmt.Errorf("token %d does not fit in %d bits beside the epoch", l.Token(), tokenBits)}
	}
	f.mu.Lock()
	if f.epoch != epoch || f.closed {
		// Switched (or closed) while the grant was on its way.
		f.mu.Unlock()
		f.releaseLater(l)
		return nil, errSwitched
	}
	f.leases[fl] = struct{}{}
	f.maxTTL = max(f.maxTTL, req.TTL)
	f.mu.Unlock()
	return fl, nil
}

// waitFence waits until fence, the end of the fence after a switch to
// engine idx, if req waits; actx is attempt's context, which a switch or
// Close cancels.
func (f *Failover) waitFence(ctx, actx context.Context, req engine.Request, fence time.Time,
	idx int) error {
	wait := time.Until(fence)
	if wait <= 0 {
		return nil
	}
	if !req.Wait {
		return fmt.Errorf("%w: fenced for %v after the switch to %s", engine.ErrNotAcquired,
			wait.Round(time.Millisecond), f.engines[idx].Name)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-actx.Done():
	}
	switch cause := context.Cause(actx); {
	case errors.Is(cause, errSwitched):
		return errSwitched
	case errors.Is(cause, engine.ErrClosed) && ctx.Err() == nil:
		return engine.ErrClosed
	}
	return errors.Join(engine.ErrNotAcquired, ctx.Err())
}

// releaseLater releases l in the background, bounded, where its engine
// still answers.
func (f *Failover) releaseLater(l engine.Lease) {
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Release(ctx)
	}()
}

// switchTo makes engines[to] active: new epoch (at least minEpoch), old
// leases ended with ErrEngineSwitched and released in the background,
// waiters moved.
func (f *Failover) switchTo(to int, reason string, minEpoch uint64) {
	f.mu.Lock()
	if f.closed || to == f.active || f.epoch+1 >= 1<<(64-tokenBits) {
		// (After 65535 switches the epoch would overflow its bits and
		// tokens would go backwards: the process stays where it is.)
		f.mu.Unlock()
		return
	}
	from := f.active
	f.active = to
	f.epoch = max(f.epoch+1, minEpoch)
	fence := f.opts.MinFence
	if f.maxTTL > 0 {
		// A silent holder on the old engine keeps its key for its lease
		// period, or for the engine's floor where that is longer.
		fence = max(fence, f.maxTTL, f.engines[from].Engine.Limits().Floor)
	}
	if f.opts.Fence && fence > 0 {
		f.fenceUntil = time.Now().Add(fence)
	}
	f.maxTTL = 0
	lost := make([]*failoverLease, 0, len(f.leases))
	for l := range f.leases {
		lost = append(lost, l)
	}
	f.leases = make(map[*failoverLease]struct{})
	for cancel := range f.waiters {
		(*cancel)(errSwitched)
	}
	ev := SwitchEvent{From: f.engines[from].Name, To: f.engines[to].Name, Epoch: f.epoch,
		Reason: reason, LostLeases: len(lost), FenceUntil: f.fenceUntil}
	f.mu.Unlock()
	for _, l := range lost {
		l.sig.Close(fmt.Errorf("%w: from %s to %s", engine.ErrEngineSwitched, ev.From, ev.To))
		f.releaseLater(l.inner)
	}
	if f.opts.OnSwitch != nil {
		f.opts.OnSwitch(ev)
	}
}

// healthLoop runs a health round at a fixed schedule (one every interval,
// start to start), and a quick probe of the active engine whenever real
// traffic reports it unavailable.
func (f *Failover) healthLoop() {
	defer close(f.loopDone)
	next := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-f.closing:
			return
		case <-t.C:
			interval := f.checkHealth()
			// The next round starts one interval after this one started;
			// rounds missed while the machine stalled are skipped.
			for next = next.Add(interval); !next.After(time.Now()); next = next.Add(interval) {
			}
		case <-f.suspect:
			f.probeActive()
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(time.Until(next))
	}
}

// pingBudget is how long a health round waits for its pings: a round never
// outlasts its interval, whatever a client library's own retries do.
func pingBudget(interval time.Duration) time.Duration { return interval * 9 / 10 }

// pingAll pings the engines named by idx at once, each bounded by budget,
// and returns their results. A ping still running at the budget counts as
// failed (it is left to finish in the background, and that engine is not
// pinged again until it has).
func (f *Failover) pingAll(idx []int, budget time.Duration) []pingResult {
	type answer struct {
		j int
		r pingResult
	}
	res := make([]pingResult, len(idx))
	answers := make(chan answer, len(idx)) // late answers land here unread
	waiting := 0
	for j, i := range idx {
		if !f.pinging[i].CompareAndSwap(false, true) {
			res[j] = pingResult{err: fmt.Errorf("%w: the previous ping has not answered",
				engine.ErrUnavailable)}
			continue
		}
		res[j] = pingResult{err: fmt.Errorf("%w: no answer to ping within %v", engine.ErrUnavailable,
			budget)}
		waiting++
		go func() {
			defer f.pinging[i].Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			start := time.Now()
			err := f.engines[i].Engine.Ping(ctx)
			answers <- answer{j, pingResult{err: err, d: time.Since(start)}}
		}()
	}
	deadline := time.NewTimer(budget)
	defer deadline.Stop()
	for ; waiting > 0; waiting-- {
		select {
		case a := <-answers:
			res[a.j] = a.r
		case <-deadline.C:
			return res
		}
	}
	return res
}

type pingResult struct {
	err error
	d   time.Duration
}

// checkHealth pings every engine once, applies the policy, and returns the
// interval to the next round.
func (f *Failover) checkHealth() time.Duration {
	f.mu.Lock()
	interval := f.opts.Interval
	f.mu.Unlock()
	idx := make([]int, len(f.engines))
	for i := range idx {
		idx[i] = i
	}
	f.record(idx, f.pingAll(idx, pingBudget(interval)))
	return interval
}

// record applies ping results to the engines named by idx, then the
// policy: it may switch, and tells OnHealth of a change.
func (f *Failover) record(idx []int, res []pingResult) (healthy bool) {
	f.mu.Lock()
	changed := false
	for j, i := range idx {
		h, r := &f.health[i], res[j]
		was := h.Healthy
		if r.err == nil {
			h.Failures, h.Healthy, h.Latency, h.LastErr = 0, true, r.d, ""
		} else {
			h.Failures++
			h.LastErr = r.err.Error()
			if h.Failures >= f.opts.Threshold {
				h.Healthy = false
			}
		}
		changed = changed || h.Healthy != was
	}
	healthy = f.health[f.active].Healthy
	to, reason := f.choose()
	f.mu.Unlock()
	if changed && f.opts.OnHealth != nil {
		f.opts.OnHealth(f.Status())
	}
	if to >= 0 {
		f.switchTo(to, reason, 0)
	}
	return healthy
}

// QuickProbeSpacing is the delay between the quick re-probes that a
// failure on real traffic starts (see Failover): the active engine is
// pinged at once, then again after each spacing until it answers or has
// failed Threshold times in a row.
const QuickProbeSpacing = 50 * time.Millisecond

// noteFailure is called with the error of a call on the active engine:
// ErrUnavailable, with the caller's context still live, asks the health
// loop for a quick probe.
func (f *Failover) noteFailure(ctx context.Context, err error) {
	if err == nil || !errors.Is(err, engine.ErrUnavailable) || (ctx != nil && ctx.Err() != nil) {
		return
	}
	select {
	case f.suspect <- struct{}{}:
	default:
	}
}

// probeActive pings the active engine until it answers or has failed
// Threshold times in a row, QuickProbeSpacing apart. One failed call on a
// healthy engine thus costs one ping and changes nothing.
func (f *Failover) probeActive() {
	f.mu.Lock()
	active, interval, threshold := f.active, f.opts.Interval, f.opts.Threshold
	healthy := f.health[active].Healthy
	f.mu.Unlock()
	if !healthy {
		return // already down: the policy has had its say
	}
	spacing := min(QuickProbeSpacing, interval)
	for n := 0; n < threshold; n++ {
		if n > 0 {
			select {
			case <-f.closing:
				return
			case <-time.After(spacing):
			}
		}
		res := f.pingAll([]int{active}, pingBudget(interval))
		if res[0].err == nil {
			f.record([]int{active}, res)
			return
		}
		if !f.record([]int{active}, res) {
			return // down now
		}
	}
}

// Configure applies new tunables without a restart, as a configuration
// reload does: Interval, Threshold, Auto, Failback and Fence take effect
// from the next health round, MinFence from the next switch; a changed
// Active is applied as SetActive would (an empty one clears the
// override); an Epoch above the current one raises it, so that every
// later token is larger (an operator can bring a fleet's epochs back in
// step this way); a lower Epoch is ignored, since tokens must not go
// back. OnSwitch and OnHealth stay as NewFailover set them. An unknown
// Active clears the override, as an unknown one at start does, and
// Configure returns ErrUnknownEngine after applying the rest.
func (f *Failover) Configure(opts FailoverOptions) error {
	opts = opts.withDefaults()
	if opts.Interval < 0 || opts.Threshold < 0 || opts.Epoch >= 1<<(64-tokenBits) {
		return fmt.Errorf("%w: failover: interval %v, threshold %d, epoch %d", engine.ErrInvalidRequest,
			opts.Interval, opts.Threshold, opts.Epoch)
	}
	f.mu.Lock()
	f.opts.Interval, f.opts.Threshold = opts.Interval, opts.Threshold
	f.opts.Auto, f.opts.Failback, f.opts.Fence = opts.Auto, opts.Failback, opts.Fence
	f.opts.MinFence = opts.MinFence
	if opts.Epoch > f.epoch {
		f.epoch = opts.Epoch
	}
	changed := opts.Active != f.override
	f.mu.Unlock()
	if !changed {
		return nil
	}
	if err := f.SetActive(opts.Active); err != nil {
		_ = f.SetActive("")
		return err
	}
	return nil
}

// choose returns the engine the policy wants instead of the active one, or
// -1. Call with f.mu held.
func (f *Failover) choose() (int, string) {
	if !f.opts.Auto {
		return -1, ""
	}
	first := -1
	for i, h := range f.health {
		if h.Healthy {
			first = i
			break
		}
	}
	if first < 0 {
		return -1, "" // nothing better to go to
	}
	activeHealthy := f.health[f.active].Healthy
	switch {
	case !activeHealthy:
		return first, "failover"
	case f.opts.Failback && first < f.active && f.engines[f.active].Name != f.override:
		return first, "failback"
	}
	return -1, ""
}

// Close stops the health loop, waits for background releases, and closes
// every engine, which ends their leases with ErrClosed.
func (f *Failover) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	close(f.closing)
	for cancel := range f.waiters {
		(*cancel)(engine.ErrClosed)
	}
	f.mu.Unlock()
	<-f.loopDone
	f.bg.Wait()
	var errs []error
	for _, ne := range f.engines {
		if err := ne.Engine.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ne.Name, err))
		}
	}
	return errors.Join(errs...)
}

// failoverLease is a lease of the active engine, stamped with its epoch.
type failoverLease struct {
	f      *Failover
	epoch  uint64
	engine string
	inner  engine.Lease
	sig    *engine.Signal
}

func (l *failoverLease) Key() string           { return l.inner.Key() }
func (l *failoverLease) Mode() engine.Mode     { return l.inner.Mode() }
func (l *failoverLease) Token() uint64         { return l.epoch<<tokenBits | l.inner.Token() }
func (l *failoverLease) Done() <-chan struct{} { return l.sig.Done() }

// EngineName names the engine that granted the lease, for observers
// (engine.Namer).
func (l *failoverLease) EngineName() string { return l.engine }
func (l *failoverLease) Err() error         { return l.sig.Err() }

// Nodes passes on the inner lease's node count (see Lease.Nodes); a lease
// of an engine without nodes reports 0 of 0.
func (l *failoverLease) Nodes() (held, total int) {
	if n, ok := l.inner.(interface{ Nodes() (held, total int) }); ok {
		return n.Nodes()
	}
	return 0, 0
}

// innerLost passes the engine's loss on; a loss for want of the server
// (a failed renewal) asks for a quick probe.
func (l *failoverLease) innerLost(err error) {
	if l.f.forget(l) {
		l.f.noteFailure(nil, err)
	}
	l.sig.Close(err)
}

// Release releases on the lease's engine. After a switch the lease has
// already ended (and its release is under way in the background): Release
// returns ErrNotHeld wrapping ErrEngineSwitched.
func (l *failoverLease) Release(ctx context.Context) error {
	if !l.f.forget(l) {
		if err := l.sig.Err(); err != nil {
			return fmt.Errorf("%w: %q: %w", engine.ErrNotHeld, l.Key(), err)
		}
	}
	err := l.inner.Release(ctx)
	if err != nil {
		l.f.noteFailure(ctx, err)
		cause := l.inner.Err()
		if cause == nil {
			cause = err
		}
		l.sig.Close(cause)
		return err
	}
	l.sig.Close(engine.ErrReleased)
	return nil
}

// forget stops tracking l and reports whether it was tracked.
func (f *Failover) forget(l *failoverLease) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.leases[l]
	delete(f.leases, l)
	return ok
}

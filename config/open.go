package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/failover"
)

// FailoverOptions maps the configuration's policy onto the manager's
// options: the pinned engine, health checks, auto, failback and fence.
// With an engine key, switching is the fleet's decision, not the
// manager's: Auto and Failback are off here (Open's fleet coordinator
// applies them through the key), and the fence lasts at least the lease
// period, since other processes' leases on the old engine are not seen
// here.
func (c *Config) FailoverOptions() failover.Options {
	o := failover.Options{
		Active:    c.Active,
		Interval:  c.Health.Interval,
		Threshold: c.Health.Threshold,
		Auto:      c.Auto,
		Failback:  c.Failback == FailbackAuto,
		Fence:     c.Fence,
	}
	if c.EngineKey.Set() {
		o.Auto, o.Failback = false, false
		if c.Fence {
			o.MinFence = c.leasePeriod()
		}
	}
	return o
}

// leasePeriod is how long a lease granted under these defaults lasts
// without renewal.
func (c *Config) leasePeriod() time.Duration {
	if c.Lease.TTL > 0 {
		return c.Lease.TTL
	}
	return c.Lease.Watchdog
}

// LeaseOptions maps the lease defaults onto Client options: a fixed TTL
// when Lease.TTL is set, otherwise renewal with Lease.Watchdog, and the
// hold limit when Lease.HoldLimit is set.
func (c *Config) LeaseOptions() []cerberus.Option {
	opts := []cerberus.Option{cerberus.WithWatchdog(c.Lease.Watchdog)}
	if c.Lease.TTL > 0 {
		opts = []cerberus.Option{cerberus.WithTTL(c.Lease.TTL)}
	}
	if c.Lease.HoldLimit > 0 {
		opts = append(opts, cerberus.WithHoldLimit(c.Lease.HoldLimit))
	}
	return opts
}

// Service is a running configuration: a Client over a failover.Manager of the
// configured engines, kept in step with the configuration file.
type Service struct {
	// Client hands out leases.
	Client *cerberus.Client
	// Failover is the manager behind Client: Status, SetActive, Handler.
	Failover *failover.Manager

	cfg  *Config
	stop context.CancelFunc
	done chan struct{}
	once sync.Once
}

// Open loads the file at path, builds its engines, starts a failover.Manager with
// its policy and a Client with its lease defaults, and watches the file:
// an edited pinned engine, health check, auto, failback or fence setting
// applies without a restart (failover.Manager.Configure). With engine_key set, the
// Consul key's value decides the engine instead of the file's engine
// setting (a reload that finds that setting logs PinWarning), so a whole
// fleet flips together, and the process registers in the fleet and takes
// part in its automatic decisions (see EngineKey).
// Changes to the engine
// list or to lease defaults need a restart; they are logged to log (nil:
// slog.Default()) and not applied, as is a file that no longer validates.
// extra options are passed to the Client after the configured ones.
func Open(ctx context.Context, path string, log *slog.Logger,
	extra ...cerberus.Option) (*Service, error) {
	if log == nil {
		log = slog.Default()
	}
	cfg, err := Load(path)
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings() {
		log.Warn("cerberus config", slog.String("path", path), slog.String("warning", w))
	}
	named, err := cfg.Build(ctx)
	if err != nil {
		return nil, err
	}
	var fl atomic.Pointer[fleet] // set once the fleet runs
	f, kv, kvDone, err := newFailover(ctx, cfg, named, &fl, log)
	var c *cerberus.Client
	if err == nil {
		if c, err = cerberus.New(f, append(cfg.LeaseOptions(), extra...)...); err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		if kvDone != nil {
			kvDone()
		}
		return nil, err
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &Service{Client: c, Failover: f, cfg: cfg, stop: stop, done: make(chan struct{})}
	var wg sync.WaitGroup
	if cfg.EngineKey.Set() {
		p := newFleet(cfg, f, kv, log)
		p.publish() // under the key from the start: see failover.Manager.ActiveEngine
		fl.Store(p)
		wg.Add(2)
		go func() { defer wg.Done(); p.follow(wctx) }()
		go func() { defer wg.Done(); p.run(wctx) }()
	}
	go func() {
		defer close(s.done)
		defer func() {
			if kvDone != nil {
				kvDone()
			}
		}()
		defer wg.Wait()
		watchFile(wctx, path, cfg, f, &fl, log)
	}()
	return s, nil
}

// newFailover starts a failover.Manager over the built engines with cfg's policy.
// With engine_key set it also makes the key's Consul client (kvDone closes
// it): the key's value decides the engine, Switch writes it, and a change
// of health wakes the fleet (fl, once it runs). On failure it closes the
// engines.
func newFailover(ctx context.Context, cfg *Config, named []Named, fl *atomic.Pointer[fleet],
	log *slog.Logger) (f *failover.Manager, kv *api.Client, kvDone func(), err error) {
	engines := make([]failover.NamedEngine, len(named))
	for i, n := range named {
		engines[i] = failover.NamedEngine{Name: n.Name, Engine: n.Engine}
	}
	fo := cfg.FailoverOptions()
	fo.Logger = log
	if cfg.EngineKey.Set() {
		if kv, kvDone, err = kvClient(&cfg.EngineKey); err != nil {
			closeNamed(named)
			return nil, nil, nil, err
		}
		startOnKey(ctx, cfg, kv, &fo, log)
		fo.Switch = func(ctx context.Context, name string,
			wait time.Duration) (failover.SwitchReport, error) {
			return Switch(ctx, cfg, name, wait, nil)
		}
		fo.OnHealth = func([]failover.EngineStatus) {
			if p := fl.Load(); p != nil {
				p.poke()
			}
		}
	}
	if f, err = failover.New(engines, fo); err != nil {
		closeNamed(named)
	}
	return f, kv, kvDone, err
}

// watchFile applies each edit of the file at path to f until ctx ends (see
// Open); started is the configuration Open started with.
func watchFile(ctx context.Context, path string, started *Config, f *failover.Manager,
	fl *atomic.Pointer[fleet], log *slog.Logger) {
	err := Watch(ctx, path, func(next *Config, err error) {
		if err != nil {
			log.Warn("cerberus config reload refused; the running configuration stays",
				slog.String("path", path), slog.String("err", err.Error()))
			return
		}
		if !sameEngines(started, next) || started.Lease != next.Lease {
			log.Warn("cerberus config: engines or lease defaults changed; they apply after a restart",
				slog.String("path", path))
		}
		opts := next.FailoverOptions()
		if p := fl.Load(); p != nil {
			// The fleet's engine key decides the engine, not the file.
			opts.Active = p.f.Active()
			p.setPolicy(next.fleetPolicy())
			if pw := next.PinWarning(path); pw != "" {
				log.Warn("cerberus config: the file's engine is not applied; the engine key decides",
					slog.String("path", path), slog.String("key", next.EngineKey.Key),
					slog.String("warning", pw))
			}
		}
		if err := f.Configure(opts); err != nil {
			log.Warn("cerberus config reload", slog.String("path", path), slog.String("err", err.Error()))
			return
		}
		log.Info("cerberus config reloaded", slog.String("path", path), slog.String("active", f.Active()))
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("cerberus config watch stopped", slog.String("path", path),
			slog.String("err", err.Error()))
	}
}

// startOnKey reads the engine key once, so that a process joining a fleet
// starts on the fleet's engine and epoch rather than switching (and
// fencing) right after it starts. If the key cannot be read in time, the
// process starts as the file says and the follower catches up.
func startOnKey(ctx context.Context, cfg *Config, kv *api.Client, fo *failover.Options,
	log *slog.Logger) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	fl := &fleet{k: cfg.EngineKey, kv: kv, def: cfg.defaultEngine()}
	v, _, _, err := fl.readKey(rctx, &api.QueryOptions{})
	if err != nil {
		log.Warn("cerberus engine key unreadable at start; starting as the file says",
			slog.String("key", cfg.EngineKey.Key), slog.String("err", err.Error()))
		return
	}
	if cfg.Find(v.Engine) != nil && v.Epoch < 1<<16 {
		fo.Active, fo.Epoch = v.Engine, v.Epoch
	}
}

func closeNamed(named []Named) {
	for _, n := range named {
		_ = n.Engine.Close()
	}
}

// Use switches engines as an operator would: with engine_key, the whole
// fleet through the key (Switch: every process moves, and Use waits up to
// wait for them and reports who followed); without it, this process only
// (failover.Manager.SetActive), and the report's scope says so. name "" means the
// default engine with engine_key, and clears this process's pin without.
func (s *Service) Use(ctx context.Context, name string,
	wait time.Duration) (failover.SwitchReport, error) {
	if s.cfg.EngineKey.Set() {
		return Switch(ctx, s.cfg, name, wait, nil)
	}
	if err := s.Failover.SetActive(name); err != nil {
		return failover.SwitchReport{}, err
	}
	return failover.SwitchReport{Scope: failover.ScopeProcess, Engine: s.Failover.Active(),
		Epoch: s.Failover.Epoch()}, nil
}

// sameEngines reports whether two configurations list the same engines.
func sameEngines(a, b *Config) bool {
	if len(a.Engines) != len(b.Engines) {
		return false
	}
	for i := range a.Engines {
		if fmt.Sprint(a.Engines[i]) != fmt.Sprint(b.Engines[i]) {
			return false
		}
	}
	return true
}

// Close stops watching the file and closes the Client, which closes the
// failover manager and every engine.
func (s *Service) Close() error {
	var err error
	s.once.Do(func() {
		s.stop()
		<-s.done
		err = s.Client.Close()
	})
	return err
}

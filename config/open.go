package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cerberus-go/cerberus"
)

// FailoverOptions maps the configuration's policy onto the manager's
// options: the pinned engine, health checks, auto, failback and fence.
func (c *Config) FailoverOptions() cerberus.FailoverOptions {
	return cerberus.FailoverOptions{
		Active:    c.Engine,
		Interval:  c.Health.Interval,
		Threshold: c.Health.Threshold,
		Auto:      c.Auto,
		Failback:  c.Failback == FailbackAuto,
		Fence:     c.Fence,
	}
}

// LeaseOptions maps the lease defaults onto Client options: a fixed TTL
// when Lease.TTL is set, otherwise renewal with Lease.Watchdog.
func (c *Config) LeaseOptions() []cerberus.Option {
	if c.Lease.TTL > 0 {
		return []cerberus.Option{cerberus.WithTTL(c.Lease.TTL)}
	}
	return []cerberus.Option{cerberus.WithWatchdog(c.Lease.Watchdog)}
}

// Service is a running configuration: a Client over a Failover of the
// configured engines, kept in step with the configuration file.
type Service struct {
	// Client hands out leases.
	Client *cerberus.Client
	// Failover is the manager behind Client: Status, SetActive, Handler.
	Failover *cerberus.Failover

	stop context.CancelFunc
	done chan struct{}
	once sync.Once
}

// Open loads the file at path, builds its engines, starts a Failover with
// its policy and a Client with its lease defaults, and watches the file:
// an edited pinned engine, health check, auto, failback or fence setting
// applies without a restart (Failover.Configure); with engine_key set, the
// Consul key's value pins the engine instead of the file's engine setting,
// so a whole fleet flips together. Changes to the engine
// list or to lease defaults need a restart; they are logged to log (nil:
// slog.Default()) and not applied, as is a file that no longer validates.
// extra options are passed to the Client after the configured ones.
func Open(ctx context.Context, path string, log *slog.Logger, extra ...cerberus.Option) (*Service, error) {
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
	engines := make([]cerberus.NamedEngine, len(named))
	for i, n := range named {
		engines[i] = cerberus.NamedEngine{Name: n.Name, Engine: n.Engine}
	}
	f, err := cerberus.NewFailover(engines, cfg.FailoverOptions())
	if err != nil {
		for _, n := range named {
			_ = n.Engine.Close()
		}
		return nil, err
	}
	c, err := cerberus.New(f, append(cfg.LeaseOptions(), extra...)...)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &Service{Client: c, Failover: f, stop: stop, done: make(chan struct{})}
	started := cfg
	var kvValue atomic.Pointer[string] // the engine key's value, once read
	var wg sync.WaitGroup
	if cfg.EngineKey.Set() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			followEngineKey(wctx, cfg.EngineKey, f, log, func(v string) { kvValue.Store(&v) })
		}()
	}
	go func() {
		defer close(s.done)
		defer wg.Wait()
		err := Watch(wctx, path, func(next *Config, err error) {
			if err != nil {
				log.Warn("cerberus config reload refused; the running configuration stays", slog.String("path", path), slog.String("err", err.Error()))
				return
			}
			if !sameEngines(started, next) || started.Lease != next.Lease {
				log.Warn("cerberus config: engines or lease defaults changed; they apply after a restart", slog.String("path", path))
			}
			opts := next.FailoverOptions()
			if started.EngineKey.Set() {
				// The fleet's engine key pins the engine, not the file.
				opts.Active = ""
				if v := kvValue.Load(); v != nil {
					opts.Active = *v
				}
			}
			if err := f.Configure(opts); err != nil {
				log.Warn("cerberus config reload", slog.String("path", path), slog.String("err", err.Error()))
				return
			}
			log.Info("cerberus config reloaded", slog.String("path", path), slog.String("active", f.Active()))
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("cerberus config watch stopped", slog.String("path", path), slog.String("err", err.Error()))
		}
	}()
	return s, nil
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
// Failover and every engine.
func (s *Service) Close() error {
	var err error
	s.once.Do(func() {
		s.stop()
		<-s.done
		err = s.Client.Close()
	})
	return err
}

package config

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/failover"
)

// Switch moves the whole fleet of cfg to name (an engine of cfg, or "" for
// the default engine) through the engine key, then waits up to wait (0:
// failover.DefaultFleetWait; negative: no wait) until every live
// registered process reports name at the new epoch. progress, if not nil,
// is called with the first count and each change of it. The error is nil
// when the key was written, even if stragglers remain: the report's Done
// says whether everyone followed. Without engine_key, Switch returns an
// error wrapping ErrInvalid: the caller switches the file (SetEngine) or
// one process (failover.Manager.SetActive).
func Switch(ctx context.Context, cfg *Config, name string, wait time.Duration,
	progress func(failover.SwitchReport)) (failover.SwitchReport, error) {
	if !cfg.EngineKey.Set() {
		return failover.SwitchReport{}, fmt.Errorf("%w: engine_key: not configured, so there is no "+
			"fleet to switch", ErrInvalid)
	}
	if name != "" && cfg.Find(name) == nil {
		return failover.SwitchReport{}, fmt.Errorf("%w: engine: %q is not a configured engine",
			ErrInvalid, name)
	}
	fl, done, err := dialFleet(cfg)
	if err != nil {
		return failover.SwitchReport{}, err
	}
	defer done()
	k := &fl.k
	v, err := writeEngineKey(ctx, fl, name)
	if err != nil {
		return failover.SwitchReport{}, err
	}
	v = fl.resolve(v)
	if wait == 0 {
		wait = failover.DefaultFleetWait
	}
	deadline := time.Now().Add(max(wait, 0))
	var last failover.SwitchReport
	for first := true; ; first = false {
		members, err := fl.list(ctx)
		if err != nil {
			return last, fmt.Errorf("engine_key: %s written; reading the fleet: %w", k.Key, err)
		}
		r := failover.SwitchReport{Scope: failover.ScopeFleet, Engine: v.Engine, Epoch: v.Epoch}
		for _, m := range members {
			if m.Active == v.Engine && (v.Epoch == 0 || m.Epoch >= v.Epoch) {
				r.Followed = append(r.Followed, m)
			} else {
				r.Stragglers = append(r.Stragglers, m)
			}
		}
		if progress != nil &&
			(first || len(r.Followed) != len(last.Followed) || len(r.Stragglers) != len(last.Stragglers)) {
			progress(r)
		}
		last = r
		if r.Done() || !time.Now().Before(deadline) {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("engine_key: %s written; waiting for the fleet: %w", k.Key, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writeEngineKey writes name with the next fleet epoch, check-and-set,
// retried while other writers get in between, and returns what it wrote.
func writeEngineKey(ctx context.Context, fl *fleet, name string) (keyValue, error) {
	k, c := &fl.k, fl.kv
	host, _ := os.Hostname()
	for range 10 {
		pair, _, err := c.KV().Get(k.Key, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return keyValue{}, fmt.Errorf("engine_key: writing %s on %s: reading it first: %w", k.Key,
				k.Consul, k.scrub(err))
		}
		var cur keyValue
		var idx uint64
		if pair != nil {
			cur, idx = parseKeyValue(pair.Value), pair.ModifyIndex
		}
		members, err := fl.list(ctx)
		if err != nil {
			return keyValue{}, fmt.Errorf("engine_key: writing %s on %s: reading the fleet first: %w", k.Key,
				k.Consul, err)
		}
		next := keyValue{Engine: name, Epoch: nextEpoch(cur, members), Reason: "operator",
			By: fmt.Sprintf("%s/%d", host, os.Getpid()), At: time.Now().UTC()}
		ok, err := casKey(ctx, c, k, next, idx)
		if err != nil {
			return keyValue{}, err
		}
		if ok {
			return next, nil
		}
	}
	return keyValue{}, fmt.Errorf("engine_key: %s kept changing under 10 writes; try again", k.Key)
}

// ReadFleet reads cfg's fleet as an operator sees it from outside: the
// engine key's value (Engine, Epoch) and every live registered process.
// Without engine_key it returns an error wrapping ErrInvalid.
func ReadFleet(ctx context.Context, cfg *Config) (failover.FleetStatus, error) {
	if !cfg.EngineKey.Set() {
		return failover.FleetStatus{}, fmt.Errorf("%w: engine_key: not configured; the fleet view needs "+
			"it", ErrInvalid)
	}
	fl, done, err := dialFleet(cfg)
	if err != nil {
		return failover.FleetStatus{}, err
	}
	defer done()
	k := &fl.k
	v, _, _, err := fl.readKey(ctx, &api.QueryOptions{})
	if err != nil {
		return failover.FleetStatus{}, fmt.Errorf("engine_key: reading %s on %s: %w", k.Key, k.Consul,
			err)
	}
	members, err := fl.list(ctx)
	if err != nil {
		return failover.FleetStatus{}, fmt.Errorf("engine_key: reading the fleet under %s: %w", k.Key,
			err)
	}
	return failover.FleetStatus{Scope: failover.ScopeFleet, Key: k.Key, Engine: v.Engine,
		Epoch: v.Epoch, Members: members, Updated: time.Now()}, nil
}

// dialFleet makes a Consul client for cfg's engine key and a fleet over it
// that reads and writes the key from outside (no manager, no
// registration); done closes the client's idle connections.
func dialFleet(cfg *Config) (*fleet, func(), error) {
	c, done, err := kvClient(&cfg.EngineKey)
	if err != nil {
		return nil, nil, err
	}
	return &fleet{k: cfg.EngineKey, kv: c, def: cfg.defaultEngine()}, done, nil
}

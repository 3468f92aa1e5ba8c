package config

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// kvClient makes a Consul client for an engine key, with its ACL token and
// TLS settings and a pooled transport whose idle connections done closes.
// The token comes from the configuration only, never from the CONSUL_*
// environment.
func kvClient(k *EngineKey) (*api.Client, func(), error) {
	ac := api.DefaultNonPooledConfig()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	ac.Transport, ac.Address, ac.Token, ac.TokenFile = tr, k.Consul, k.token, ""
	if k.TLS != nil {
		ac.Scheme, ac.TLSConfig = "https", k.TLS.consulConfig()
		// A clone of http.DefaultTransport has a TLS config (its HTTP/2
		// set-up), which would make api.NewClient ignore ac.TLSConfig.
		tc, err := api.SetupTLSConfig(&ac.TLSConfig)
		if err != nil {
			return nil, nil, fmt.Errorf("engine_key.tls: %w", err)
		}
		tr.TLSClientConfig = tc
	}
	c, err := api.NewClient(ac)
	if err != nil {
		return nil, nil, k.scrub(err)
	}
	return c, tr.CloseIdleConnections, nil
}

// scrub returns err, or its text without the token if the text holds it
// (the consul client sends the token in a header, so it should not).
func (k *EngineKey) scrub(err error) error {
	if err == nil || len(k.token) < 3 || !strings.Contains(err.Error(), k.token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), k.token, redacted))
}

// SetEngineKey writes name (an engine of cfg, or "" for the default: the
// file's engine setting, or the first engine in order) to cfg's Consul
// engine key, which every process that Opened the configuration follows.
// The value carries the next fleet epoch (above the key's and every live
// process's), and is written with a check-and-set, retried when another
// writer got in between.
func SetEngineKey(ctx context.Context, cfg *Config, name string) error {
	if !cfg.EngineKey.Set() {
		return fmt.Errorf("%w: engine_key: not configured", ErrInvalid)
	}
	if name != "" && cfg.Find(name) == nil {
		return fmt.Errorf("%w: engine: %q is not a configured engine", ErrInvalid, name)
	}
	k := &cfg.EngineKey
	c, done, err := kvClient(k)
	if err != nil {
		return err
	}
	defer done()
	fl := &fleet{k: *k, kv: c}
	for range 10 {
		pair, _, err := c.KV().Get(k.Key, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("engine_key: writing %s on %s: reading it first: %w", k.Key, k.Consul, k.scrub(err))
		}
		var cur keyValue
		var idx uint64
		if pair != nil {
			cur, idx = parseKeyValue(pair.Value), pair.ModifyIndex
		}
		members, err := fl.list(ctx)
		if err != nil {
			return fmt.Errorf("engine_key: writing %s on %s: reading the fleet first: %w", k.Key, k.Consul, err)
		}
		host, _ := os.Hostname()
		next := keyValue{Engine: name, Epoch: nextEpoch(cur, members), Reason: "operator",
			By: fmt.Sprintf("%s/%d", host, os.Getpid()), At: time.Now().UTC()}
		ok, err := casKey(ctx, c, k, next, idx)
		if err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("engine_key: %s kept changing under 10 writes; try again", k.Key)
}

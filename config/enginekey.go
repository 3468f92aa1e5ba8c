package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus"
)

// kvClient makes a Consul client for an engine key, with a pooled
// transport whose idle connections close is closes.
func kvClient(addr string) (*api.Client, func(), error) {
	ac := api.DefaultNonPooledConfig()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	ac.Transport, ac.Address, ac.Token, ac.TokenFile = tr, addr, "", ""
	c, err := api.NewClient(ac)
	if err != nil {
		return nil, nil, err
	}
	return c, tr.CloseIdleConnections, nil
}

// SetEngineKey writes name (an engine of cfg, or "" to unpin) to cfg's
// Consul engine key, which every process that Opened the configuration
// follows.
func SetEngineKey(ctx context.Context, cfg *Config, name string) error {
	if !cfg.EngineKey.Set() {
		return fmt.Errorf("%w: engine_key: not configured", ErrInvalid)
	}
	if name != "" && cfg.Find(name) == nil {
		return fmt.Errorf("%w: engine: %q is not a configured engine", ErrInvalid, name)
	}
	c, done, err := kvClient(cfg.EngineKey.Consul)
	if err != nil {
		return err
	}
	defer done()
	_, err = c.KV().Put(&api.KVPair{Key: cfg.EngineKey.Key, Value: []byte(name)}, (&api.WriteOptions{}).WithContext(ctx))
	return err
}

// followEngineKey keeps f's pinned engine equal to the key's value until
// ctx ends, with blocking queries. cur receives every value applied.
func followEngineKey(ctx context.Context, k EngineKey, f *cerberus.Failover, log *slog.Logger, cur func(string)) {
	c, done, err := kvClient(k.Consul)
	if err != nil {
		log.Warn("cerberus engine key: no client", slog.String("err", err.Error()))
		return
	}
	defer done()
	var index uint64
	last := "\x00unset"
	for ctx.Err() == nil {
		pair, meta, err := c.KV().Get(k.Key, (&api.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(ctx))
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("cerberus engine key: read failed; retrying", slog.String("key", k.Key), slog.String("err", err.Error()))
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		if meta.LastIndex < index {
			index = 0 // the index went back (a new agent state): start over
		} else {
			index = meta.LastIndex
		}
		value := ""
		if pair != nil {
			value = string(pair.Value)
		}
		if value == last {
			continue
		}
		last = value
		cur(value)
		if err := f.SetActive(value); err != nil {
			if errors.Is(err, cerberus.ErrUnknownEngine) {
				_ = f.SetActive("")
			}
			log.Warn("cerberus engine key names no configured engine; unpinned", slog.String("key", k.Key), slog.String("value", value))
			continue
		}
		log.Info("cerberus engine key applied", slog.String("key", k.Key), slog.String("active", f.Active()))
	}
}

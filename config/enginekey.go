package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus"
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
	k := &cfg.EngineKey
	c, done, err := kvClient(k)
	if err != nil {
		return err
	}
	defer done()
	_, err = c.KV().Put(&api.KVPair{Key: k.Key, Value: []byte(name)}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("engine_key: writing %s on %s: %w", k.Key, k.Consul, k.scrub(err))
	}
	return nil
}

// followEngineKey keeps f's pinned engine equal to the key's value until
// ctx ends, with blocking queries. cur receives every value applied.
func followEngineKey(ctx context.Context, k EngineKey, f *cerberus.Failover, log *slog.Logger, cur func(string)) {
	c, done, err := kvClient(&k)
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
				log.Warn("cerberus engine key: read failed; retrying", slog.String("key", k.Key), slog.String("err", k.scrub(err).Error()))
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

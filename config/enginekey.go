package config

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

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
// first engine in order) to cfg's Consul
// engine key, which every process that Opened the configuration follows.
// The value carries the next fleet epoch (above the key's and every live
// process's), and is written with a check-and-set, retried when another
// writer got in between. It does not wait for the fleet to follow; Switch
// does.
func SetEngineKey(ctx context.Context, cfg *Config, name string) error {
	_, err := Switch(ctx, cfg, name, -1, nil)
	return err
}

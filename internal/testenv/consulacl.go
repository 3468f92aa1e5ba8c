package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// ConsulUUID returns a random UUID, the form Consul gives its ACL tokens.
func ConsulUUID(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// StartConsulACL starts a dev agent (StartConsul) with ACLs on and
// default_policy deny, the extra HCL appended, and returns it with its
// management token, which is also the agent's own token. mgmt is that
// token, or "" for a fresh one.
func StartConsulACL(t testing.TB, mgmt string, hcl ...string) (*Consul, string) {
	t.Helper()
	if mgmt == "" {
		mgmt = ConsulUUID(t)
	}
	acl := fmt.Sprintf(`acl {
  enabled = true
  default_policy = "deny"
  tokens {
    initial_management = %q
    agent = %q
  }
}`, mgmt, mgmt)
	return StartConsul(t, append([]string{acl}, hcl...)...), mgmt
}

// ConsulToken creates, with the management token, a policy of rules and a
// token for it on the agent at addr, and returns the token's secret. It
// retries while the agent's ACL system is still coming up, for up to 30s.
func ConsulToken(t testing.TB, addr, mgmt, rules string) string {
	t.Helper()
	cfg := api.DefaultNonPooledConfig()
	cfg.Address, cfg.Token = addr, mgmt
	cfg.Transport.DisableKeepAlives = true
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := (&api.WriteOptions{}).WithContext(ctx)
	var p *api.ACLPolicy
	for { // the ACL system comes up a moment after the leader
		p, _, err = c.ACL().PolicyCreate(&api.ACLPolicy{Name: "cerberus-" + ConsulUUID(t)[:8],
			Rules: rules}, w)
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("testenv: consul policy create: %v", err)
	}
	tok, _, err := c.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: p.ID}}},
		w)
	if err != nil {
		t.Fatalf("testenv: consul token create: %v", err)
	}
	return tok.SecretID
}

package consul

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
)

// TestScrub: an error that somehow carries the token loses it, and keeps
// its context cause and the OpError shape.
func TestScrub(t *testing.T) {
	const token = "3f1b-secret-acl-token"
	e, err := New(&api.Client{}, WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cause := fmt.Errorf("Get \"http://127.0.0.1:8500/v1/kv/x?token=%s\": %w", token, context.DeadlineExceeded)
	got := e.opErr(ctx, "acquire", "k", cause)
	if strings.Contains(got.Error(), token) {
		t.Errorf("error shows the token: %v", got)
	}
	if !strings.Contains(got.Error(), "<redacted>") {
		t.Errorf("error %q does not say where the token was removed", got)
	}
	if !errors.Is(got, context.DeadlineExceeded) || !errors.Is(got, engine.ErrUnavailable) {
		t.Errorf("scrubbed error lost its causes: %v", got)
	}
	var op *engine.OpError
	if !errors.As(got, &op) || op.Op != "acquire" || op.Key != "k" {
		t.Errorf("want *engine.OpError for acquire of k, got %#v", got)
	}
	refused := e.opErr(ctx, "acquire", "k", fmt.Errorf("token %s: %w", token, api.StatusError{Code: 403, Body: "Permission denied"}))
	if errors.Is(refused, engine.ErrUnavailable) || !errors.Is(refused, engine.ErrAccessDenied) || strings.Contains(refused.Error(), token) {
		t.Errorf("a scrubbed 403 is ErrAccessDenied, not unavailability: %v", refused)
	}
}

// TestClassify: Consul's answers sorted by the rule of
// engine.ErrUnavailable.
func TestClassify(t *testing.T) {
	e, err := New(&api.Client{})
	if err != nil {
		t.Fatal(err)
	}
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want error // nil: neither mark
	}{
		{"refused connection", live, &url.Error{Op: "Get", URL: "http://127.0.0.1:1", Err: errors.New("connection refused")}, engine.ErrUnavailable},
		{"no leader", live, errNoLeader, engine.ErrUnavailable},
		{"500", live, api.StatusError{Code: 500, Body: "rpc error"}, engine.ErrUnavailable},
		{"429", live, api.StatusError{Code: 429, Body: "rate limited"}, engine.ErrUnavailable},
		{"401", live, api.StatusError{Code: 401}, engine.ErrAccessDenied},
		{"403", live, api.StatusError{Code: 403, Body: "ACL not found"}, engine.ErrAccessDenied},
		{"500 permission denied", live, api.StatusError{Code: 500, Body: "rpc error making call: Permission denied"}, engine.ErrAccessDenied},
		{"400", live, api.StatusError{Code: 400, Body: "bad request"}, nil},
		{"gave up", live, errors.New("gave up after 8 attempts"), nil},
		{"caller cancelled", cancelled, &url.Error{Op: "Get", URL: "http://127.0.0.1:1", Err: context.Canceled}, nil},
	}
	for _, c := range cases {
		got := e.opErr(c.ctx, "acquire", "k", c.err)
		for _, mark := range []error{engine.ErrUnavailable, engine.ErrAccessDenied} {
			if errors.Is(got, mark) != (mark == c.want) {
				t.Errorf("%s: %v: wraps %v is %v, want %v", c.name, got, mark, errors.Is(got, mark), mark == c.want)
			}
		}
	}
}

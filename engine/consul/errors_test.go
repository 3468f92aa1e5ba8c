package consul

import (
	"context"
	"errors"
	"fmt"
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
	cause := fmt.Errorf("Get \"http://127.0.0.1:8500/v1/kv/x?token=%s\": %w", token, context.DeadlineExceeded)
	got := e.opErr("acquire", "k", cause)
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
	refused := e.opErr("acquire", "k", api.StatusError{Code: 403, Body: "Permission denied"})
	if errors.Is(refused, engine.ErrUnavailable) {
		t.Errorf("a 403 is not unavailability: %v", refused)
	}
}

package cerberus_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
)

// TestReexportedErrors checks that the root package's names match what the
// library returns, so a caller needs no import of package engine.
func TestReexportedErrors(t *testing.T) {
	_, err := cerberus.New(nil)
	if !errors.Is(err, cerberus.ErrInvalidRequest) {
		t.Errorf("New with no engine: %v; want cerberus.ErrInvalidRequest", err)
	}
	opErr := fmt.Errorf("lock: %w", &engine.OpError{Engine: "redis", Op: "acquire", Key: "k",
		Err: fmt.Errorf("%w: dial tcp: refused", engine.ErrUnavailable)})
	var oe *cerberus.OpError
	if !errors.As(opErr, &oe) || oe.Engine != "redis" || oe.Op != "acquire" {
		t.Errorf("errors.As(%v, *cerberus.OpError) = %v, %+v; want the engine's OpError", opErr, oe != nil, oe)
	}
	if !errors.Is(opErr, cerberus.ErrUnavailable) {
		t.Errorf("%v does not match cerberus.ErrUnavailable", opErr)
	}
}

package config

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: built
// engines, their clients and Watch must all stop what they start.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

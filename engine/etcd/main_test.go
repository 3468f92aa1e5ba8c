package etcd_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// engine and client must stop what it started when it is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

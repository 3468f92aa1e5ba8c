package zookeeper_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// engine, its watches and its connection must stop what they started when
// they are closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

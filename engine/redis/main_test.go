package redis

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// engine and client must stop what it started when it is closed.
//
// go-redis's dial probe (started after a pool's dials fail PoolSize times
// in a row, as they do against a killed node) sleeps a second between
// probes and sees its pool closed only when it wakes: it is go-redis's,
// not the engine's, and ends within a second of the client's Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

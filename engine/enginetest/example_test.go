package enginetest_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/redis"
)

// An engine's tests run the suite from a TestConformance function, with a
// Factory that connects a fresh engine to a real server on every call;
// here the Redis engine, on the address the tests are given.
func ExampleRun() {
	var addr string // e.g. from the environment: "127.0.0.1:6379"

	// In the engine's _test.go file: func TestConformance(t *testing.T).
	testConformance := func(t *testing.T) {
		enginetest.Run(t, func() (engine.Engine, error) {
			return redis.New(goredis.NewClient(&goredis.Options{Addr: addr}))
		}, enginetest.Options{})
	}
	_ = testConformance
}

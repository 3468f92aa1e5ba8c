package redis

import (
	"os"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// holderAddrEnv gives a holder process of enginetest.RunPausedRelease the
// Redis address (see holderEngine).
const holderAddrEnv = "CERBERUS_REDIS_HOLDER_ADDR"

// holderEngine is the engine of a holder process, on the server its
// environment names; the engine closes its client with it.
func holderEngine() (engine.Engine, error) {
	c := goredis.NewClient(&goredis.Options{Addr: os.Getenv(holderAddrEnv)})
	e, err := New(c)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return closing{e, c}, nil
}

// closing is an engine that closes its client after itself.
type closing struct {
	*Engine
	c *goredis.Client
}

// Close closes the engine, then the client.
func (e closing) Close() error {
	err := e.Engine.Close()
	_ = e.c.Close()
	return err
}

// TestMain fails the package's tests if any goroutine outlives them: every
// engine and client must stop what it started when it is closed.
//
// go-redis's dial probe (started after a pool's dials fail PoolSize times
// in a row, as they do against a killed node) sleeps a second between
// probes and sees its pool closed only when it wakes: it is go-redis's,
// not the engine's, and ends within a second of the client's Close.
//
// Started by enginetest.RunPausedRelease, it holds a key instead.
func TestMain(m *testing.M) {
	if code, ok := enginetest.Hold(holderEngine); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

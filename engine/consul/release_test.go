package consul_test

import (
	"os"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestMain runs the package's tests, or, started as a holder process of
// enginetest.RunPausedRelease, holds a key instead (see holderEngine).
func TestMain(m *testing.M) {
	if code, ok := enginetest.Hold(holderEngine); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// The environment TestForceRelease gives its holder process.
const (
	holderAddrEnv = "CERBERUS_CONSUL_TEST_HOLDER_ADDR"
	holderFairEnv = "CERBERUS_CONSUL_TEST_HOLDER_FAIR"
)

// holderEngine is the engine of a holder process: on the agent its
// environment names, in fair mode if it says so.
func holderEngine() (engine.Engine, error) {
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = os.Getenv(holderAddrEnv)
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return consul.New(c, consul.WithPrefix(testPrefix), consul.WithLockDelay(0),
		consul.WithFair(os.Getenv(holderFairEnv) == "true"))
}

// TestForceRelease runs enginetest.RunRelease, then
// enginetest.RunPausedRelease with a holder process, on the shared agent,
// without fair mode and with it.
func TestForceRelease(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "Unfair", true: "Fair"}[fair], func(t *testing.T) {
			newEngine := func() (engine.Engine, error) {
				return consul.New(newClient(t, addr), consul.WithPrefix(testPrefix), consul.WithLockDelay(0),
					consul.WithFair(fair))
			}
			enginetest.RunRelease(t, newEngine)
			fairEnv := holderFairEnv + "=false"
			if fair {
				fairEnv = holderFairEnv + "=true"
			}
			enginetest.RunPausedRelease(t, newEngine, holderAddrEnv+"="+addr, fairEnv)
		})
	}
}

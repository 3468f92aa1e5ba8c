package consul_test

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestList runs enginetest.RunList on the shared agent, without fair mode
// (Waiters unknown) and with it (Waiters counted).
func TestList(t *testing.T) {
	addr := testenv.ConsulAddr(t)
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "Unfair", true: "Fair"}[fair], func(t *testing.T) {
			enginetest.RunList(t, func() (engine.Engine, error) {
				return consul.New(newClient(t, addr), consul.WithPrefix(testPrefix), consul.WithLockDelay(0),
					consul.WithFair(fair))
			})
		})
	}
}

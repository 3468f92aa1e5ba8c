package failover_test

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/failover"
)

// TestConformance holds a Manager to the engine contract: the
// conformance suite runs on one over two memory engines as on any engine.
// Every Manager the factory makes shares the two engines' stores, as
// processes share servers.
func TestConformance(t *testing.T) {
	primary, secondary := memory.NewStore(), memory.NewStore()
	enginetest.Run(t, func() (engine.Engine, error) {
		return failover.New([]failover.NamedEngine{
			{Name: "primary", Engine: memory.New(memory.WithStore(primary))},
			{Name: "secondary", Engine: memory.New(memory.WithStore(secondary))},
		}, failover.Options{})
	}, enginetest.Options{})
}

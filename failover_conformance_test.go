package cerberus_test

import (
	"testing"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/memory"
)

// TestFailoverConformance holds a Failover to the engine contract: the
// conformance suite runs on one over two memory engines as on any engine.
// Every Failover the factory makes shares the two engines' stores, as
// processes share servers.
func TestFailoverConformance(t *testing.T) {
	primary, secondary := memory.NewStore(), memory.NewStore()
	enginetest.Run(t, func() (engine.Engine, error) {
		return cerberus.NewFailover([]cerberus.NamedEngine{
			{Name: "primary", Engine: memory.New(memory.WithStore(primary))},
			{Name: "secondary", Engine: memory.New(memory.WithStore(secondary))},
		}, cerberus.FailoverOptions{})
	}, enginetest.Options{})
}

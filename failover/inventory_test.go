package failover_test

import (
	"context"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/failover"
)

// TestList runs enginetest.RunList on Managers over two memory engines:
// the listed tokens are the Manager's, as its leases carry them.
func TestList(t *testing.T) {
	primary, secondary := memory.NewStore(), memory.NewStore()
	enginetest.RunList(t, func() (engine.Engine, error) {
		return failover.New([]failover.NamedEngine{
			{Name: "primary", Engine: memory.New(memory.WithStore(primary))},
			{Name: "secondary", Engine: memory.New(memory.WithStore(secondary))},
		}, failover.Options{})
	})
}

// TestListFollowsSwitch: after a switch the Manager lists the new active
// engine, not the keys left on the old one, with tokens that carry the new
// epoch, as its leases' do.
func TestListFollowsSwitch(t *testing.T) {
	old := memory.NewStore()
	m, err := failover.New([]failover.NamedEngine{
		{Name: "primary", Engine: memory.New(memory.WithStore(old))},
		{Name: "secondary", Engine: memory.New()},
	}, failover.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	other := memory.New(memory.WithStore(old)) // another process on the old engine
	defer other.Close()
	if _, err := other.Acquire(ctx, engine.Request{Key: "sw/a", Renew: true, TTL: engine.MaxTTL}); err != nil {
		t.Fatal(err)
	}
	if inv, err := m.List(ctx, "sw/", 0); err != nil || len(inv.Keys) != 1 {
		t.Fatalf("List on primary = %+v, %v; want sw/a", inv, err)
	}
	if err := m.SetActive("secondary"); err != nil {
		t.Fatal(err)
	}
	if inv, err := m.List(ctx, "sw/", 0); err != nil || len(inv.Keys) != 0 {
		t.Errorf("List after the switch = %+v, %v; want nothing", inv, err)
	}
	l, err := m.Acquire(ctx, engine.Request{Key: "sw/b", Renew: true, TTL: engine.MaxTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	inv, err := m.List(ctx, "sw/", 0)
	if err != nil || len(inv.Keys) != 1 || inv.Keys[0].Holders[0].Token != l.Token() || m.Epoch() == 0 {
		t.Errorf("List after a grant in epoch %d = %+v, %v; want sw/b with the lease's token %d",
			m.Epoch(), inv, err, l.Token())
	}
}

package config

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/memory"
)

// TestLeaseHoldLimit: lease.hold_limit reaches the Client through
// LeaseOptions: a renewed lease ends at it, with ErrHoldLimit.
func TestLeaseHoldLimit(t *testing.T) {
	cfg, err := Parse([]byte(mem+"lease: {watchdog: 50ms, hold_limit: 200ms}\n"), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(memory.New(), cfg.LeaseOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("lease still held 3s after its 200ms hold limit")
	}
	if !errors.Is(l.Err(), cerberus.ErrHoldLimit) {
		t.Fatalf("Err = %v, want ErrHoldLimit", l.Err())
	}
}

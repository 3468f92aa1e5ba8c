package kit

import (
	"errors"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
)

// TestLeaseCore: an embedded LeaseCore gives its lease the accessors of
// engine.Lease, reading what NewLeaseCore and SetToken recorded, and its
// Signal calls onLost before Done closes.
func TestLeaseCore(t *testing.T) {
	type lease struct {
		LeaseCore
		extra int
	}
	var lost error
	l := &lease{LeaseCore: NewLeaseCore("k", engine.Shared, func(err error) { lost = err })}
	l.SetToken(42)
	if l.Key() != "k" || l.Mode() != engine.Shared || l.Token() != 42 || l.Err() != nil {
		t.Fatalf("Key, Mode, Token, Err = %q, %v, %d, %v; want k, shared, 42, nil", l.Key(), l.Mode(), l.Token(), l.Err())
	}
	done := l.Done()
	select {
	case <-done:
		t.Fatal("Done closed before the lease ended")
	default:
	}
	if !l.Signal.Close(engine.ErrLeaseLost) {
		t.Fatal("the first Close did not end the signal")
	}
	<-done
	if !errors.Is(l.Err(), engine.ErrLeaseLost) || !errors.Is(lost, engine.ErrLeaseLost) {
		t.Fatalf("Err = %v, onLost got %v; want ErrLeaseLost both", l.Err(), lost)
	}
}

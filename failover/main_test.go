package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// Manager must stop its health loop and background releases on Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ctxT is a context for one test step, bounded (20s) so that a hang fails.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// must returns the lease, failing the test on an error.
func must(t *testing.T) func(*cerberus.Lease, error) *cerberus.Lease {
	return func(l *cerberus.Lease, err error) *cerberus.Lease {
		t.Helper()
		if err != nil {
			t.Fatalf("lock: %v", err)
		}
		return l
	}
}

// next returns the next leader Observe delivers, failing after 5s.
func next(t *testing.T, ch <-chan cerberus.Leader, what string) cerberus.Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatalf("%s: Observe's channel closed", what)
		}
		return l
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing observed within 5s", what)
	}
	return cerberus.Leader{}
}

package memory

import (
	"context"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// The memory engine keeps its tokens in its Store, in the process: what
// DESIGN.md's contract 5 asks of a server engine holds for engines that
// share a Store (a "client restart" is a new engine on the same Store), and
// nothing survives the process. These tests show both, so that README.md's
// "What a token survives" stays true.

// cycles grants key on e n times (every third grant shared), releasing each
// lease, and returns the largest token seen; each token must be above the
// one before, the first above after. A token that is not fails the test
// and ends the cycles.
func cycles(t *testing.T, e engine.Engine, key string, n int, after uint64) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		req := engine.Request{Key: key, Mode: engine.Exclusive, TTL: 10 * time.Second}
		if i%3 == 2 {
			req.Mode = engine.Shared
		}
		l, err := e.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l.Token() <= after {
			t.Errorf("grant %d (%v) of %s: token %d after %d; tokens must strictly increase", i+1, req.Mode, key,
				l.Token(), after)
			return after
		}
		after = l.Token()
	}
	return after
}

// TestTokensAfterEngineRestart: three engines in turn on one Store, each
// closed before the next opens; each continues above the last token of the
// one before.
func TestTokensAfterEngineRestart(t *testing.T) {
	store := NewStore()
	var last uint64
	for range 3 {
		e := New(WithStore(store))
		last = cycles(t, e, "restart", 10, last)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTokensOfANewStoreStartOver: a new Store, as a new process has, knows
// nothing of the tokens of another: its first token is 1 again. The memory
// engine does not fence across processes.
func TestTokensOfANewStoreStartOver(t *testing.T) {
	old := New()
	defer old.Close()
	last := cycles(t, old, "restart", 10, 0)
	e := New()
	defer e.Close()
	if first := cycles(t, e, "restart", 1, 0); first != 1 {
		t.Errorf("first token of a new Store: %d, want 1 (below the other Store's %d)", first, last)
	}
}

package enginetest

import (
	"context"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// watchRounds is how many Watch-then-grant rounds checkWatchRightAfter runs:
// the race it looks for (a watch set up only after Watch returned) is
// lost in some rounds and won in others.
const watchRounds = 10

// checkWatchRightAfter: on a Watcher, a grant made the moment Watch
// returns, on the watching engine itself, is told within a few seconds,
// not only at the next re-check or when the watch's context ends; the
// key has been held before, so its server state exists already. An engine
// that is not a Watcher is logged and passes.
func checkWatchRightAfter(h *harness) {
	e := h.engine()
	w, ok := e.(engine.Watcher)
	if !ok {
		h.t.Logf("the engine is not an engine.Watcher")
		return
	}
	const within = 5 * time.Second
	for i := range watchRounds {
		key := h.key()
		h.release(h.acquire(e, try(key)))
		ctx, cancel := context.WithTimeout(context.Background(), within+time.Second)
		ch, err := w.Watch(ctx, key)
		if err != nil {
			cancel()
			h.t.Fatalf("Watch: %v", err)
		}
		l := h.acquire(e, try(key))
		select {
		case _, ok := <-ch:
			if !ok {
				h.t.Fatalf("round %d: the watch closed instead of telling a grant", i)
			}
		case <-time.After(within):
			h.t.Fatalf("round %d: a grant made right after Watch returned was not told within %v", i, within)
		}
		h.release(l)
		cancel()
		for range ch { // drained until the close
		}
	}
}

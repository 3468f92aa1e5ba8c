package redis

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// sweeper sends again, in the background, the clean-ups (an attempt's
// undo, a lease's release) that got no answer: the server was stopped,
// stalled or away, or the client's pool was exhausted. One goroutine per
// engine sends every pending clean-up in one pipeline, from 50ms after the
// first failure, then twice as long after each failed pipeline up to a
// second, 50ms after one that was answered; so an outage costs the server
// one pipeline per pause however many clean-ups wait, and never a flood of
// retries when it comes back.
//
// A clean-up that must follow everything its request may have left unread
// in the server's socket (an undo of an attempt that got no answer) is
// sent once more after its first answer (see attempt.undo); a release
// needs one answer, since its compare-and-delete run late frees nothing
// that is not its own.
type sweeper struct {
	e       *Engine
	mu      sync.Mutex
	pending []*cleanup
	running bool
}

// cleanup is one pending clean-up.
type cleanup struct {
	queue func(ctx context.Context, pipe goredis.Pipeliner) []goredis.Cmder
	need  int       // answers it needs (1 or 2)
	until time.Time // dropped after this: what it would undo has expired
}

// add queues c and starts the sweeping goroutine if none runs.
func (s *sweeper) add(c *cleanup) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, c)
	if !s.running && s.e.frame.Go(s.run) {
		s.running = true
	}
}

// run sends the pending clean-ups until none is left or the engine closes.
func (s *sweeper) run() {
	pause := 50 * time.Millisecond
	for {
		if !s.e.pauseUnlessClosing(pause) {
			s.mu.Lock()
			s.pending, s.running = nil, false
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		s.mu.Unlock()
		now := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), s.e.opts.timeout)
		pipe := s.e.c.Pipeline()
		cmds := make([][]goredis.Cmder, len(batch))
		for i, c := range batch {
			cmds[i] = c.queue(ctx, pipe)
		}
		_, _ = pipe.Exec(ctx)
		cancel()
		var again []*cleanup
		failed, noScript := false, false
		for i, c := range batch {
			answered := true
			for _, cmd := range cmds[i] {
				switch err := cmd.Err(); {
				case hasNoScript(err):
					// A restarted server: load the scripts, send it again.
					noScript, answered = true, false
				case err != nil && down(err):
					failed, answered = true, false
				}
			}
			switch {
			case answered:
				if c.need--; c.need > 0 {
					again = append(again, c)
				}
			case now.Before(c.until):
				again = append(again, c)
			}
		}
		if noScript {
			ctx, cancel := context.WithTimeout(context.Background(), s.e.opts.timeout)
			loadScripts(ctx, s.e.c)
			cancel()
		}
		pause = min(2*pause, time.Second)
		if !failed {
			pause = 50 * time.Millisecond
		}
		s.mu.Lock()
		s.pending = append(again, s.pending...)
		if len(s.pending) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// pauseUnlessClosing waits d, and reports false at once instead when the
// engine is closing.
func (e *Engine) pauseUnlessClosing(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.frame.Closing():
		return false
	}
}

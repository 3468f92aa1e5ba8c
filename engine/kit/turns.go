package kit

import (
	"context"
	"github.com/cerberus-go/cerberus/engine"
	"sync"
)

// Turns lets one waiter per key at a time do the costly part of waiting,
// such as polling the server or holding a blocking query open, while the
// engine's other waiters on that key queue locally and take over in turn.
// Without it, hundreds of waiters in one process on one hot key each send
// their own statements or hold their own connections, and the server spends
// its time on them instead of on the holder's release. The zero value is
// ready to use.
type Turns struct {
	mu sync.Mutex
	m  map[string]*turn
}

type turn struct {
	token chan struct{} // full while a waiter has the turn
	kick  chan struct{}
	users int
}

// Take waits until the caller has key's turn, or ctx or stop ends first
// (then it returns ctx.Err(), or engine.ErrClosed for stop). On success it returns
// the channel Kick signals and the function that hands the turn on, which
// must be called exactly once.
func (t *Turns) Take(ctx context.Context, key string,
	stop <-chan struct{}) (kick <-chan struct{}, done func(), err error) {
	t.mu.Lock()
	if t.m == nil {
		t.m = make(map[string]*turn)
	}
	tn := t.m[key]
	if tn == nil {
		tn = &turn{token: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
		t.m[key] = tn
	}
	tn.users++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		if tn.users--; tn.users == 0 {
			delete(t.m, key)
		}
		t.mu.Unlock()
	}
	select {
	case tn.token <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, nil, ctx.Err()
	case <-stop:
		leave()
		return nil, nil, engine.ErrClosed
	}
	return tn.kick, func() { <-tn.token; leave() }, nil
}

// Kick wakes the waiter that has key's turn, if any: a release by the same
// engine can tell it to try at once instead of at its next poll.
func (t *Turns) Kick(key string) {
	t.mu.Lock()
	tn := t.m[key]
	t.mu.Unlock()
	if tn != nil {
		select {
		case tn.kick <- struct{}{}:
		default:
		}
	}
}

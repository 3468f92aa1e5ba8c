package redis

import (
	"context"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// hub shares one pub/sub connection among the engine's waiters. A channel
// is subscribed while anyone waits on it.
type hub struct {
	e      *Engine
	mu     sync.Mutex
	ps     *goredis.PubSub // nil until the first waiter
	chans  map[string]*channelState
	closed bool
	// ops are the SUBSCRIBE and UNSUBSCRIBE commands not yet sent, in
	// order; one goroutine sends them, so no waiter ever blocks on the
	// pub/sub connection and an unsubscribe never overtakes a subscribe.
	ops  []psOp
	kick chan struct{} // wakes the sender; closed by close
}

// psOp is one queued SUBSCRIBE (sub) or UNSUBSCRIBE.
type psOp struct {
	sub     bool
	channel string
}

type channelState struct {
	waiters []*waiter
	ready   chan struct{} // closed when the subscription is confirmed
	isReady bool
}

// waiter is one Acquire waiting on a channel.
type waiter struct {
	channel string
	id      string // the lease id a release names to wake this waiter
	shared  bool
	wake    chan struct{} // buffered: a wake-up is never lost, only merged
}

func newHub(e *Engine) *hub {
	return &hub{e: e, chans: make(map[string]*channelState), kick: make(chan struct{}, 1)}
}

// subscribeWait bounds how long join waits for the subscription to be
// confirmed; past it the waiter relies on its recheck timer.
const subscribeWait = time.Second

// join registers a waiter on channel and returns once the subscription is
// confirmed (or after a bounded wait), so that a release published after the
// waiter's next attempt reaches it.
func (h *hub) join(ctx context.Context, channel, id string, shared bool) *waiter {
	w := &waiter{channel: channel, id: id, shared: shared, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return w
	}
	if h.ps == nil {
		h.ps = h.e.c.Subscribe(context.Background())
		go h.dispatch(h.ps.ChannelWithSubscriptions())
		go h.send(h.ps)
	}
	st := h.chans[channel]
	if st == nil {
		st = &channelState{ready: make(chan struct{})}
		h.chans[channel] = st
		h.enqueue(psOp{sub: true, channel: channel})
	}
	st.waiters = append(st.waiters, w)
	ready := st.ready
	h.mu.Unlock()
	t := time.NewTimer(subscribeWait)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
	case <-ctx.Done():
	}
	return w
}

// leave unregisters a waiter, unsubscribing when it was the channel's last.
func (h *hub) leave(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.chans[w.channel]
	if st == nil {
		return
	}
	for i, x := range st.waiters {
		if x == w {
			st.waiters = append(st.waiters[:i], st.waiters[i+1:]...)
			break
		}
	}
	if len(st.waiters) == 0 {
		delete(h.chans, w.channel)
		if !h.closed {
			h.enqueue(psOp{channel: w.channel})
		}
	}
}

// enqueue queues a pub/sub command for send; h.mu is held and the hub is
// open.
func (h *hub) enqueue(op psOp) {
	h.ops = append(h.ops, op)
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// send sends the queued pub/sub commands in order, each bounded by the
// engine's timeout, until the hub closes. A command lost to a broken
// connection costs its waiters a recheck delay, never a hang: go-redis
// subscribes again to every channel when it reconnects.
func (h *hub) send(ps *goredis.PubSub) {
	for range h.kick {
		for {
			h.mu.Lock()
			if len(h.ops) == 0 || h.closed {
				h.mu.Unlock()
				break
			}
			op := h.ops[0]
			h.ops = h.ops[1:]
			h.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), h.e.opts.timeout)
			if op.sub {
				_ = ps.Subscribe(ctx, op.channel)
			} else {
				_ = ps.Unsubscribe(ctx, op.channel)
			}
			cancel()
		}
	}
}

// dispatch reads the pub/sub connection until it is closed.
func (h *hub) dispatch(ch <-chan any) {
	for msg := range ch {
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				h.mu.Lock()
				if st := h.chans[m.Channel]; st != nil && !st.isReady {
					st.isReady = true
					close(st.ready)
				}
				h.mu.Unlock()
			}
		case *goredis.Message:
			h.notify(m.Channel, m.Payload)
		}
	}
}

// notify wakes the waiters a release on channel names: "w:<id>" names one
// waiting writer (the queue head in fair mode), so a release wakes one
// waiter across every process instead of all of them; "*" wakes everyone.
func (h *hub) notify(channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.chans[channel]
	if st == nil {
		return
	}
	id, one := strings.CutPrefix(payload, "w:")
	for _, w := range st.waiters {
		if one && w.id != id {
			continue
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// close shuts the pub/sub connection; waiters fall back to their timers.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.kick)
	if h.ps != nil {
		_ = h.ps.Close()
	}
}

package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
)

// hub shares one pub/sub connection among the engine's waiters. Waiting
// writers listen on the engine's wake channel, subscribed from the first
// wait until Close, on which a release names the one writer it wakes.
// Waiting readers listen on their key's channel, subscribed while any of
// them waits there, on which a release with no writer waiting says "*".
type hub struct {
	e      *Engine
	mu     sync.Mutex
	ps     *goredis.PubSub // nil until the first waiter
	wake   string          // the engine's wake channel
	chans  map[string]*channelState
	ids    map[string]*waiter // waiting writers by lease id
	closed bool
	// ops are the SUBSCRIBE and UNSUBSCRIBE commands not yet sent, in
	// order; one goroutine sends them, so no waiter ever blocks on the
	// pub/sub connection and an unsubscribe never overtakes a subscribe.
	ops  []psOp
	kick chan struct{} // wakes the sender; closed by close
	stop chan struct{} // closed by close
	// delay holds back every message's delivery: tests set it, before
	// the first wait, to play a slow pub/sub connection.
	delay time.Duration
}

// psOp is one queued SUBSCRIBE (sub) or UNSUBSCRIBE.
type psOp struct {
	sub     bool
	channel string
}

type channelState struct {
	waiters []*waiter     // readers; the wake channel keeps its writers in ids
	ready   chan struct{} // closed when the subscription is confirmed
	isReady bool
}

// waiter is one Acquire waiting for a release.
type waiter struct {
	channel string        // the key's channel (reader, watcher) or the wake channel (writer)
	id      string        // the lease id a release names to wake this waiter
	watch   bool          // a Watch, not an Acquire: woken by "w" and by a resubscription
	wake    chan struct{} // buffered: a wake-up is never lost, only merged
	grant   *grant        // the hand-off a release published for this waiter; guarded by hub.mu
}

// grant is a hand-off as a release publishes it (see luaHandOff): the
// fencing token, the server's time in microseconds from the registration
// it served to the grant, and that registration's attempt number.
type grant struct {
	token      uint64
	d, attempt int64
}

// parseGrant reads "<token> <d> <attempt>".
func parseGrant(s string) (*grant, bool) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return nil, false
	}
	tok, err1 := strconv.ParseUint(f[0], 10, 64)
	d, err2 := strconv.ParseInt(f[1], 10, 64)
	a, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, false
	}
	return &grant{token: tok, d: d, attempt: a}, true
}

func newHub(e *Engine) *hub {
	return &hub{
		e: e, wake: e.wakePrefix() + e.id,
		chans: make(map[string]*channelState), ids: make(map[string]*waiter),
		kick: make(chan struct{}, 1), stop: make(chan struct{}),
	}
}

// subscribeWait bounds how long join waits for the subscription to be
// confirmed; past it the waiter relies on its recheck timer.
const subscribeWait = time.Second

// join registers a waiter, a reader on the key's channel or a writer on
// the wake channel, and returns once that channel's subscription is
// confirmed (or after a bounded wait), so that a release published after
// the waiter's next attempt reaches it. After an engine's first wait, a
// writer's join costs no round trip.
func (h *hub) join(ctx context.Context, channel, id string, shared bool) *waiter {
	if !shared {
		channel = h.wake
	}
	return h.joinAs(ctx, &waiter{channel: channel, id: id, wake: make(chan struct{}, 1)}, shared)
}

// joinWatch registers a Watch on a key's channel as join registers a
// waiting reader.
func (h *hub) joinWatch(ctx context.Context, channel string) *waiter {
	return h.joinAs(ctx, &waiter{channel: channel, watch: true, wake: make(chan struct{}, 1)}, true)
}

func (h *hub) joinAs(ctx context.Context, w *waiter, shared bool) *waiter {
	channel, id := w.channel, w.id
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return w
	}
	if h.ps == nil {
		h.ps = h.e.c.Subscribe(context.Background())
		go h.receive(h.ps)
		go h.check(h.ps)
		go h.send(h.ps)
	}
	st := h.chans[channel]
	if st == nil {
		st = &channelState{ready: make(chan struct{})}
		h.chans[channel] = st
		h.enqueue(psOp{sub: true, channel: channel})
	}
	if shared {
		st.waiters = append(st.waiters, w)
	} else {
		h.ids[id] = w
	}
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

// joinReady registers a waiter as join does, but only when the channel it
// listens on is subscribed and confirmed already, so that it costs no I/O
// and no wait; otherwise it returns nil. A waiter that joins before its
// first attempt misses no release that follows that attempt.
func (h *hub) joinReady(channel, id string, shared bool) *waiter {
	if !shared {
		channel = h.wake
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.chans[channel]
	if h.closed || st == nil || !st.isReady {
		return nil
	}
	w := &waiter{channel: channel, id: id, wake: make(chan struct{}, 1)}
	if shared {
		st.waiters = append(st.waiters, w)
	} else {
		h.ids[id] = w
	}
	return w
}

// leave unregisters a waiter. A key's channel is unsubscribed when its
// last reader leaves; the wake channel stays.
func (h *hub) leave(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.channel == h.wake {
		if h.ids[w.id] == w {
			delete(h.ids, w.id)
		}
		return
	}
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

// receive reads the pub/sub connection until it is closed. It reads it
// itself rather than through go-redis's channel, so that a message reaches
// its waiter with one goroutine switch fewer; like that channel, it reads
// again after a failed read (go-redis reconnects and subscribes again),
// pausing from the second failure in a row on.
func (h *hub) receive(ps *goredis.PubSub) {
	failed := 0
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			if errors.Is(err, goredis.ErrClosed) {
				return
			}
			if failed > 0 {
				time.Sleep(100 * time.Millisecond)
			}
			failed++
			continue
		}
		failed = 0
		h.dispatch(msg)
	}
}

// pingEvery is how often check pings the pub/sub connection.
const pingEvery = 3 * time.Second

// check pings the pub/sub connection every pingEvery until the hub
// closes, as go-redis's channel does: a ping that fails makes go-redis
// reconnect and subscribe again.
func (h *hub) check(ps *goredis.PubSub) {
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), h.e.opts.timeout)
			_ = ps.Ping(ctx)
			cancel()
		}
	}
}

// dispatch handles one message from the pub/sub connection.
func (h *hub) dispatch(msg any) {
	switch m := msg.(type) {
	case *goredis.Subscription:
		if m.Kind == "subscribe" {
			h.mu.Lock()
			if st := h.chans[m.Channel]; st != nil && !st.isReady {
				st.isReady = true
				close(st.ready)
			} else if st != nil {
				// go-redis subscribed again after a reconnect: a message
				// may have been lost meanwhile, so tell the watchers.
				for _, w := range st.waiters {
					if w.watch {
						w.poke()
					}
				}
			}
			h.mu.Unlock()
		}
	case *goredis.Message:
		if h.delay > 0 {
			time.Sleep(h.delay)
		}
		h.notify(m.Channel, m.Payload)
	}
}

// notify wakes the waiters a message names: on the engine's wake channel
// the payload is the lease id of the one writer a release serves, so a
// release wakes one waiter across every process, followed by the grant
// when the release handed the key to it; on a key's channel "*" wakes
// every reader and watcher there, and "w" (a change nobody waits for, see
// luaTell) only the watchers.
func (h *hub) notify(channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if channel == h.wake {
		id, rest, handed := strings.Cut(payload, " ")
		if w := h.ids[id]; w != nil {
			if handed {
				w.grant, _ = parseGrant(rest)
			}
			w.poke()
		}
		return
	}
	if st := h.chans[channel]; st != nil {
		for _, w := range st.waiters {
			if w.watch || payload != "w" {
				w.poke()
			}
		}
	}
}

// granted takes the hand-off published for w, if any.
func (h *hub) granted(w *waiter) (*grant, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := w.grant
	w.grant = nil
	return g, g != nil
}

// handedOff completes an Acquire whose key a release handed to it: the
// grant counts from a.handOffAt (never later than the grant on the
// server, see the package doc), so a message delivered late shortens the
// lease and never lengthens it; one that comes after the lease's life has
// run out is refused and the key given back.
func (e *Engine) handedOff(a *attempt, g *grant) (engine.Lease, error) {
	a.at = a.handOffAt(g.attempt, g.d)
	if time.Since(a.at) >= a.life() {
		e.undoUpTo(a, true)
		return nil, fmt.Errorf("%w: %q: the hand-off arrived after its %v TTL had run out",
			engine.ErrNotAcquired, a.Key(), a.ttl)
	}
	return e.granted(a, g.token, a.at)
}

// poke wakes w; wake-ups merge, none is lost.
func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
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
	close(h.stop)
	if h.ps != nil {
		_ = h.ps.Close()
	}
}

package sqlcore

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// Attempt is what one acquisition keeps across its grant attempts.
type Attempt struct {
	// Known: the dialect may note here that the key's row exists.
	Known bool
	// Ticket is the acquisition's place in the key's queue, 0 until its
	// first refusal (see Dialect.Enqueue). A grant is refused while an
	// unexpired ticket of the key that blocks the request (BlockedByAll)
	// is below Ticket, or while any is when Ticket is 0; a grant made
	// with a ticket deletes it in the same transaction (or, where the
	// dialect cannot, fails if it cannot delete it).
	Ticket uint64
}

// Bound is the number below which unexpired tickets block the attempt:
// its ticket, or the highest ticket there can be when it has none.
func (a *Attempt) Bound() int64 {
	if a.Ticket == 0 {
		return math.MaxInt64
	}
	return int64(a.Ticket)
}

// BlockedByAll reports whether every ticket ahead of req blocks it: true
// for an exclusive or a counted request, false for a plain shared one,
// which only writers' tickets hold back (readers at the head of the queue
// go together).
func BlockedByAll(req engine.Request) bool {
	return req.Mode != engine.Shared || req.Limit > 0
}

// QueueMode is the mode a ticket of req records: 0 for exclusive, 1 for
// shared.
func QueueMode(req engine.Request) int {
	if req.Mode == engine.Shared {
		return 1
	}
	return 0
}

// minTicketTTL is the shortest life of a ticket between refreshes.
const minTicketTTL = 2 * time.Second

// ticketTTL is how long a ticket lives without a refresh: a waiter that
// crashed holds the queue up for at most this long.
func (c *Core) ticketTTL() time.Duration { return max(minTicketTTL, 4*c.cfg.MaxBackoff) }

// ownerPrefix is the LIKE pattern of every owner value of this core.
func (c *Core) ownerPrefix() string { return c.id + "-%" }

// waiter is the queue state of one waiting acquisition.
type waiter struct {
	a         Attempt
	spot      *spot         // its place in the engine's lineup, while it has a ticket
	refreshed time.Time     // before the statement that last set its tickets' expiry
	ahead     int           // blocking tickets ahead at the last look; -1 if unknown
	backoff   time.Duration // the next pause at the head of the queue
	headTries int           // pauses at the head so far
	orphan    bool          // an Enqueue failed: a ticket of its owner may exist
}

// tries reports whether the waiter's next step is a grant attempt: it has
// no ticket yet, or nothing is ahead of it.
func (w *waiter) tries() bool { return w.a.Ticket == 0 || w.ahead == 0 }

// queue is what a refused waiter does: it takes a ticket (the first time,
// or again if its ticket expired) or looks how many tickets are ahead of
// its own, refreshing the engine's tickets on the key when they are a
// third through their life. At the head of the queue it only refreshes:
// its grant attempts tell it all it needs. It returns the delay before the
// next step (see next).
func (c *Core) queue(ctx context.Context, req engine.Request, owner string, w *waiter) (time.Duration, error) {
	ttl := c.ticketTTL()
	start := time.Now()
	refresh := start.Sub(c.line.refreshed(req.Key)) >= ttl/3
	if w.a.Ticket != 0 && w.ahead == 0 && !refresh {
		return w.backoff, nil
	}
	qctx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	if w.a.Ticket != 0 {
		ahead, present, err := c.d.Queued(qctx, req, w.a.Ticket, c.ownerPrefix(), ttl, refresh)
		if err != nil {
			return 0, err
		}
		if present {
			if refresh {
				c.line.setRefreshed(req.Key, start)
			}
			if ahead == 0 {
				if w.ahead != 0 {
					w.ahead, w.backoff, w.headTries = 0, c.headBackoff().Min, 0
					return 0, nil // at the head now: try at once
				}
				return w.backoff, nil
			}
			w.ahead = ahead
			return next(ahead, c.cfg.MinBackoff, ttl/4), nil
		}
		c.line.leave(req.Key, w.spot) // expired: queue again at the tail
		w.a.Ticket, w.spot = 0, nil
	}
	t, err := c.d.Enqueue(qctx, req, owner, ttl)
	if err != nil {
		w.orphan = true // the insert may have been made: leave deletes it
		return 0, err
	}
	w.a.Ticket, w.ahead = t, -1
	w.spot = c.line.join(req.Key, t, start)
	return 0, nil
}

// headBackoff is the pause between the grant attempts of the head of the
// queue, where the next release is its grant: half the engine's first
// polling delay for the first headSteady pauses (the hold and release of
// a hot key's holder), then doubling up to its longest, so that a key
// held a while is not polled hard; back to the shortest when a release by
// this engine kicks it.
func (c *Core) headBackoff() kit.Backoff {
	return kit.Backoff{Min: max(c.cfg.MinBackoff/2, 500*time.Microsecond), Max: c.cfg.MaxBackoff}
}

// headSteady is how many pauses the head of the queue makes at its
// shortest before it backs off.
const headSteady = 8

// next is the pause of a waiter with ahead blocking tickets before it,
// not at the head: second in the queue (which the next grant makes the
// head), the head's shortest pause; further back, least for each place
// between it and the second, up to most. These steps are reads of the
// waiter's place, which lock nothing.
func next(ahead int, least, most time.Duration) time.Duration {
	head := max(least/2, 500*time.Microsecond)
	return max(head, min(least*time.Duration(ahead-1), most))
}

// lineup orders the engine's own queued waiters of each key by ticket:
// only the first of them polls the server, the others wait for a change
// of the line (a waiter leaving, a release by this engine) and look again.
// So a process with hundreds of waiters on one key sends one waiter's
// statements, and its waiters still hold their places in the queue across
// processes. The zero value is ready to use.
type lineup struct {
	mu sync.Mutex
	m  map[string]*line
}

type line struct {
	spots   []*spot       // by ticket
	changed chan struct{} // closed and replaced at every change
	// refreshed is a time before the statement that last set the expiry
	// of every ticket of the line (a refresh, or the line's first ticket).
	refreshed time.Time
}

// spot is one waiter's place in a line.
type spot struct{ ticket uint64 }

// join adds a waiter with ticket, inserted by a statement sent after
// sent, to key's line.
func (u *lineup) join(key string, ticket uint64, sent time.Time) *spot {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = make(map[string]*line)
	}
	ln := u.m[key]
	if ln == nil {
		ln = &line{changed: make(chan struct{}), refreshed: sent}
		u.m[key] = ln
	}
	s := &spot{ticket: ticket}
	i, _ := slices.BinarySearchFunc(ln.spots, ticket, func(x *spot, t uint64) int {
		return cmpUint(x.ticket, t)
	})
	ln.spots = slices.Insert(ln.spots, i, s)
	return s
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// refreshed returns when key's line last had its tickets' expiry set (the
// zero time if it has no line).
func (u *lineup) refreshed(key string) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	if ln := u.m[key]; ln != nil {
		return ln.refreshed
	}
	return time.Time{}
}

// setRefreshed records a refresh of key's line sent at sent.
func (u *lineup) setRefreshed(key string, sent time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if ln := u.m[key]; ln != nil && sent.After(ln.refreshed) {
		ln.refreshed = sent
	}
}

// leave takes s out of key's line and tells the others.
func (u *lineup) leave(key string, s *spot) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ln := u.m[key]
	if ln == nil {
		return
	}
	ln.spots = slices.DeleteFunc(ln.spots, func(x *spot) bool { return x == s })
	if len(ln.spots) == 0 {
		delete(u.m, key)
	}
	close(ln.changed)
	ln.changed = make(chan struct{})
}

// kick tells key's line that this engine released the key: its first
// waiter tries at once.
func (u *lineup) kick(key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if ln := u.m[key]; ln != nil {
		close(ln.changed)
		ln.changed = make(chan struct{})
	}
}

// first reports whether s is first in key's line, and returns the channel
// that closes at the line's next change.
func (u *lineup) first(key string, s *spot) (bool, <-chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ln := u.m[key]
	if ln == nil {
		return true, nil
	}
	return len(ln.spots) > 0 && ln.spots[0] == s, ln.changed
}

package cerberus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// electionPrefix starts the key of every election.
const electionPrefix = "election/"

// ErrNoLeader is returned by Election.Leader when nobody leads.
var ErrNoLeader = errors.New("cerberus: no leader")

var errEmptyElection = fmt.Errorf("%w: empty election name", ErrInvalidKey)

// Election is a named leader election: at most one campaigner leads at a
// time, across every process whose Client uses the same engine.
// Leadership is a Lease: its Token increases at every new term, so a
// deposed leader's writes can be fenced as a lock holder's are; its Done
// closes when leadership ends other than by Unlock (expiry, lost session,
// an engine switch), before the server can elect anyone else; Unlock
// resigns, and the next campaigner takes over at once.
//
// Campaign works on every engine. Leader and Observe read the leader's
// value from the server, which needs an engine that can list a key's
// holders (engine.Inspector: every engine but Redlock).
type Election struct {
	c    *Client
	name string
}

// Election returns the election name. It does no I/O.
func (c *Client) Election(name string) *Election {
	return &Election{c: c, name: name}
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Leader is an election's leader as others see it.
type Leader struct {
	// Value is what the leader campaigned with (its identity, an address).
	Value string
	// Token is its term's fencing token.
	Token uint64
}

// Campaign waits until it leads the election or ctx ends, and returns the
// leadership lease. value (at most engine.MaxValueLen bytes of UTF-8
// without control characters) is what Leader and Observe show; it is
// checked, with the name and options, before any I/O. A campaign that
// ctx ends leaves nothing behind. The lease's period works as a lock's:
// the default watchdog, or WithWatchdog / WithTTL; WithHoldLimit ends the
// term after at most its limit, with ErrHoldLimit.
func (e *Election) Campaign(ctx context.Context, value string, opts ...Option) (*Lease, error) {
	return e.campaign(ctx, value, true, opts)
}

// TryCampaign makes one attempt to lead, and returns ErrNotAcquired at
// once if someone else leads.
func (e *Election) TryCampaign(ctx context.Context, value string, opts ...Option) (*Lease, error) {
	return e.campaign(ctx, value, false, opts)
}

func (e *Election) campaign(ctx context.Context, value string, wait bool, opts []Option) (*Lease, error) {
	if e.name == "" {
		return nil, errEmptyElection
	}
	set := e.c.defaults.with(opts)
	req := e.c.request(electionPrefix+e.name, engine.Exclusive, wait, set)
	req.Value = value
	return e.c.acquireOnce(ctx, req, set)
}

// Leader returns the current leader, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if e.name == "" {
		return Leader{}, errEmptyElection
	}
	hs, err := holders(ctx, e.c, electionPrefix+e.name)
	if err != nil {
		return Leader{}, err
	}
	for _, h := range hs {
		if h.Mode == engine.Exclusive {
			return Leader{Value: h.Value, Token: h.Token}, nil
		}
	}
	return Leader{}, ErrNoLeader
}

// observeRecheck bounds how long Observe goes without reading the leader:
// with a server that notifies changes it is a safety net for a lost
// notification, without one it is the polling interval.
const (
	observeRecheck     = time.Second
	observePollNoWatch = 200 * time.Millisecond
)

// Observe delivers the leader (value and token) each time it changes, in
// order, starting with the current one if there is one; a vacancy is not
// delivered, the next leader is. Where the engine's server notifies
// changes (engine.Watcher) Observe waits on it and rereads at least every
// second; otherwise it rereads every 200 ms. The channel is closed when
// ctx ends, the client closes, or the engine cannot list holders (then
// nothing is delivered). Leaders come in the order of their tokens, each
// once. Observe reads the leader when told of a change, so a reader that
// is slow, or a term shorter than one read, is skipped over: the reader
// then sees the latest leader, and the gap in tokens shows it.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 1)
	key := electionPrefix + e.name
	if e.name == "" || engine.InspectorOf(e.c.eng) == nil || engine.CheckKey(key, e.c.eng.Limits().MaxKeyLen) != nil {
		close(out)
		return out
	}
	octx, cancel := context.WithCancel(ctx)
	var changes <-chan struct{}
	interval := observePollNoWatch
	if w := engine.WatcherOf(e.c.eng); w != nil {
		if ch, err := w.Watch(octx, key); err == nil {
			changes, interval = ch, observeRecheck
		}
	}
	go func() {
		defer close(out)
		defer cancel()
		var last Leader
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-octx.Done():
				return
			case _, ok := <-changes:
				if !ok {
					changes = nil // closed: the engine closed, or ctx ended
				}
			case <-timer.C:
			}
			l, err := e.Leader(octx)
			switch {
			case errors.Is(err, ErrClosed), errors.Is(err, errors.ErrUnsupported):
				// Closed, or an engine that does not list holders as
				// configured (a SQL session engine without holder
				// records): nothing will be delivered.
				return
			case err == nil && l != last && l.Token > last.Token:
				// Terms are delivered in token order: a read that lags
				// behind one already delivered (a lagging replica, a
				// notification overtaken by the recheck) is dropped.
				last = l
				select {
				case out <- l:
				case <-octx.Done():
					return
				}
			}
			timer.Reset(interval)
		}
	}()
	return out
}

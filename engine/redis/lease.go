package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
)

// lease is a Redis engine lease.
type lease struct {
	e     *Engine
	key   string
	keys  lockKeys
	mode  engine.Mode
	id    string // the value stored on the server: engine id + sequence
	ttl   time.Duration
	renew bool
	token uint64
	sig   *engine.Signal

	// The script keys and arguments every call of this lease sends, built
	// and boxed once, not on every attempt.
	acqKeys, relKeys       []string
	argID, argTTL, argChan any

	// guarded by e.mu
	due   time.Time   // next renewal (renewed leases)
	valid time.Time   // the server keeps the key at least a margin longer than this
	timer *time.Timer // local expiry (fixed leases)
}

// life is how long after sending a grant or renewal the lease counts as
// held: its TTL less engine.Margin, so that Done closes ahead of the
// server's expiry even when this process's timers run late.
func (l *lease) life() time.Duration { return l.ttl - engine.Margin(l.ttl) }

func (l *lease) Key() string           { return l.key }
func (l *lease) Mode() engine.Mode     { return l.mode }
func (l *lease) Token() uint64         { return l.token }
func (l *lease) Done() <-chan struct{} { return l.sig.Done() }
func (l *lease) Err() error            { return l.sig.Err() }

// try runs the acquire script once. It returns (true, token) on a grant and
// (false, holder's PTTL in ms or <= 0 if unknown) otherwise.
//
// starving says the caller, a default-mode writer, has waited past the
// engine's starvation threshold and takes a place in the arrival-order
// queue.
func (l *lease) try(ctx context.Context, wait, queued, starving bool) (bool, int64, error) {
	o := l.e.opts
	var res []int64
	var err error
	if l.mode == engine.Exclusive {
		res, err = acquireExclusive.Run(ctx, l.e.c, l.acqKeys,
			l.argID, l.argTTL, flag(o.fair), flag(wait), l.e.argQueueTTL, flag(queued),
			flag(starving)).Int64Slice()
	} else {
		res, err = acquireShared.Run(ctx, l.e.c, l.acqKeys, l.argID, l.argTTL).Int64Slice()
	}
	if err != nil {
		return false, 0, err
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("acquire script returned %v", res)
	}
	return res[0] == 1, res[1], nil
}

// The script flags, boxed once.
var argTrue, argFalse any = "1", "0"

func flag(b bool) any {
	if b {
		return argTrue
	}
	return argFalse
}

// undo removes, with a fresh bounded context, whatever an acquisition under
// this lease's id may have left: a grant whose reply was lost, or a place
// among the waiting writers.
func (l *lease) undo(queued bool) {
	ctx, cancel := context.WithTimeout(context.Background(), l.e.opts.timeout)
	defer cancel()
	pipe := l.e.c.Pipeline()
	l.releaseCmd(ctx, pipe)
	if queued {
		l.leaveCmd(ctx, pipe)
	}
	if _, err := pipe.Exec(ctx); hasNoScript(err) {
		loadScripts(ctx, l.e.c)
		pipe = l.e.c.Pipeline()
		l.releaseCmd(ctx, pipe)
		if queued {
			l.leaveCmd(ctx, pipe)
		}
		_, _ = pipe.Exec(ctx)
	}
}

// releaseCmd queues this lease's release script on a pipeline.
func (l *lease) releaseCmd(ctx context.Context, pipe goredis.Pipeliner) *goredis.Cmd {
	return l.releaseScript().EvalSha(ctx, pipe, l.relKeys, l.argID, l.argChan, l.e.argWake)
}

// leaveCmd queues the script that takes this lease's waiter off the queue.
func (l *lease) leaveCmd(ctx context.Context, pipe goredis.Pipeliner) {
	leaveQueue.EvalSha(ctx, pipe, []string{l.keys.ww, l.keys.q, l.keys.w, l.keys.r}, l.argID,
		l.argChan, l.e.argWake)
}

func (l *lease) releaseScript() *goredis.Script {
	if l.mode == engine.Exclusive {
		return releaseExclusive
	}
	return releaseShared
}

// newLease builds a lease for req with the keys and arguments its scripts
// take.
func (e *Engine) newLease(req engine.Request) *lease {
	l := &lease{
		e: e, key: req.Key, keys: e.keysOf(req.Key), mode: req.Mode,
		id:  e.id + ":" + strconv.FormatUint(e.seq.Add(1), 36),
		ttl: req.TTL, renew: req.Renew, sig: engine.NewSignal(req.OnLost),
	}
	k := l.keys
	if l.mode == engine.Exclusive {
		l.acqKeys = []string{k.w, k.r, k.ww, k.q, k.f}
		l.relKeys = []string{k.w, k.ww, k.q}
	} else {
		l.acqKeys = []string{k.w, k.r, k.ww, k.f}
		l.relKeys = []string{k.r, k.ww, k.q}
	}
	l.argID, l.argTTL, l.argChan = l.id, ms(l.ttl), k.c
	return l
}

// Release gives the key up with a compare-and-delete on this lease's id.
func (l *lease) Release(ctx context.Context) error {
	l.e.forget(l)
	rctx, cancel := l.e.roundTrip(ctx)
	defer cancel()
	n, err := l.releaseScript().Run(rctx, l.e.c, l.relKeys, l.argID, l.argChan, l.e.argWake).Int64()
	switch {
	case err != nil:
		// Unknown whether it still holds; it is no longer renewed, so it
		// is lost either way.
		l.sig.Close(fmt.Errorf("%w: release failed: %w", engine.ErrLeaseLost, err))
		return l.e.opError(ctx, "release", l.key, err)
	case n == 1:
		l.sig.Close(engine.ErrReleased)
		return nil
	default:
		l.sig.Close(engine.ErrLeaseLost)
		return fmt.Errorf("%w: %q (lease ended: %w)", engine.ErrNotHeld, l.key, l.sig.Err())
	}
}

// expire ends a fixed lease when its local timer fires. Redis expires the
// key on its own, no earlier than this.
func (l *lease) expire() {
	if l.e.forget(l) {
		l.sig.Close(engine.ErrLeaseLost)
	}
}

// lost ends a lease that a renewal could not extend.
func (l *lease) lost(cause error) {
	if l.e.forget(l) {
		l.sig.Close(cause)
	}
}

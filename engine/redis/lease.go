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

	// The script command lines every call of this lease sends, built once
	// (see Engine.run): "evalsha", sha, numkeys, keys..., args.... Their
	// string and integer arguments point into this struct, so building
	// them allocates no boxed values.
	acqLine, relLine []any
	ttlMS            int64
	limit            int64  // Request.Limit
	value            string // Request.Value
	// The same keys as slices, for pipelines and the Script fallback.
	acqKeys, relKeys []string
	keyArr           [8]string
	relArr           [11]string

	// Hand-off bookkeeping of a waiting Acquire (see the package doc,
	// "Hand-off"): attempt counts the acquire attempts sent, and sents
	// keeps the send times of the last len(sents) of them by attempt
	// number modulo len(sents); first is the first attempt's.
	attempt int64
	sents   [8]time.Time
	first   time.Time
	// at is when a grant counts from: the send time of the attempt that
	// was granted, or for a hand-off the bound described in the package
	// doc. It is set by try and handedOff.
	at time.Time

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
	s, line := acquireShared, l.acqLine
	args := line[3+len(l.acqKeys):]
	if l.mode == engine.Exclusive {
		s = acquireExclusive
		args[2], args[3], args[5], args[6] = flag(l.e.opts.fair), flag(wait), flag(queued), flag(starving)
	} else {
		args[2], args[4] = flag(wait), flag(queued)
	}
	l.attempt++
	sent := time.Now()
	if l.attempt == 1 {
		l.first = sent
	}
	l.sents[l.attempt%int64(len(l.sents))] = sent
	v, err := l.e.run(ctx, s, line, l.acqKeys).Result()
	if err != nil {
		return false, 0, err
	}
	if r, ok := v.([]any); ok && len(r) >= 2 {
		code, _ := r[0].(int64)
		n, okN := r[1].(int64)
		switch {
		case okN && code == 1 && len(r) == 2:
			l.at = sent
			return true, n, nil
		case okN && code == 0 && len(r) == 2:
			return false, n, nil
		case okN && code == 2 && len(r) == 4:
			d, okD := r[2].(int64)
			a, okA := r[3].(int64)
			if okD && okA {
				l.at = l.handOffAt(a, d)
				return true, n, nil
			}
		}
	}
	return false, 0, fmt.Errorf("acquire script returned %v", v)
}

// handOffAt is when a hand-off grant counts from: the send time of the
// attempt that made the registration the release served (attempt number a;
// the first attempt's when a is unknown or too old to be kept, which is
// earlier still) plus d microseconds, the server's measure of the time from
// that registration to the grant. See the package doc, "Hand-off".
func (l *lease) handOffAt(a, d int64) time.Time {
	base := l.first
	if a >= 1 && a <= l.attempt && a > l.attempt-int64(len(l.sents)) {
		base = l.sents[a%int64(len(l.sents))]
	}
	return base.Add(time.Duration(max(d, 0)) * time.Microsecond)
}

// processor runs a prebuilt command; every go-redis client is one.
type processor interface {
	Process(ctx context.Context, cmd goredis.Cmder) error
}

// run runs s as line, a prebuilt command line "evalsha", sha, len(keys),
// keys..., args.... On go-redis's own client types it sends line as it is
// (go-redis writes a *string or *int64 argument as its value, and routes
// on the first key), so a call allocates no argument list. Any other
// Client (a wrapper may override EvalSha), and a server that lost its
// script cache (NOSCRIPT), go through s.Run.
func (e *Engine) run(ctx context.Context, s *goredis.Script, line []any, keys []string) *goredis.Cmd {
	switch c := e.c.(type) {
	case *goredis.Client, *goredis.ClusterClient, *goredis.Ring:
		cmd := goredis.NewCmd(ctx, line...)
		cmd.SetFirstKeyPos(3)
		_ = c.(processor).Process(ctx, cmd)
		if !hasNoScript(cmd.Err()) {
			return cmd
		}
	}
	return s.Run(ctx, e.c, keys, line[3+len(keys):]...)
}

// line builds the command line of the script with hash sha over keys and args into buf.
func line(buf []any, sha any, keys []string, args ...any) []any {
	buf = append(buf[:0], "evalsha", sha, len(keys))
	for i := range keys {
		buf = append(buf, &keys[i])
	}
	return append(buf, args...)
}

// The scripts' hashes, boxed once.
var (
	shaAcquireExclusive, shaAcquireShared any = acquireExclusive.Hash(), acquireShared.Hash()
	shaReleaseExclusive, shaReleaseShared any = releaseExclusive.Hash(), releaseShared.Hash()
)

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
	// Leave first: once the waiter is off the queue no release can hand
	// it the key, and the release then frees a hand-off made before.
	pipe := l.e.c.Pipeline()
	if queued {
		l.leaveCmd(ctx, pipe)
	}
	l.releaseCmd(ctx, pipe)
	if _, err := pipe.Exec(ctx); hasNoScript(err) {
		loadScripts(ctx, l.e.c)
		pipe = l.e.c.Pipeline()
		if queued {
			l.leaveCmd(ctx, pipe)
		}
		l.releaseCmd(ctx, pipe)
		_, _ = pipe.Exec(ctx)
	}
}

// releaseCmd queues this lease's release script on a pipeline.
func (l *lease) releaseCmd(ctx context.Context, pipe goredis.Pipeliner) *goredis.Cmd {
	return l.releaseScript().EvalSha(ctx, pipe, l.relKeys, l.relLine[3+len(l.relKeys):]...)
}

// leaveCmd queues the script that takes this lease's waiter off the queue.
func (l *lease) leaveCmd(ctx context.Context, pipe goredis.Pipeliner) {
	leaveQueue.EvalSha(ctx, pipe, l.relKeys, l.relLine[3+len(l.relKeys):]...)
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
	var b [48]byte
	l := &lease{
		e: e, key: req.Key, keys: e.keysOf(req.Key), mode: req.Mode,
		id:  string(strconv.AppendUint(append(append(b[:0], e.id...), ':'), e.seq.Add(1), 36)),
		ttl: req.TTL, renew: req.Renew, sig: engine.NewSignal(req.OnLost),
	}
	k := &l.keys
	l.ttlMS, l.limit, l.value = ms(l.ttl), int64(req.Limit), req.Value
	const acqCap, relCap = 3 + 8 + 10, 3 + 11 + 4
	buf := make([]any, 0, acqCap+relCap) // both lines in one allocation
	if l.mode == engine.Exclusive {
		l.keyArr = [8]string{k.w, k.r, k.ww, k.q, k.f, k.h, k.x, k.wt}
		l.acqKeys = l.keyArr[:]
		l.acqLine = line(buf[:0:acqCap], shaAcquireExclusive, l.acqKeys, &l.id, &l.ttlMS, argFalse,
			argFalse, e.argQueueTTL, argFalse, argFalse, &l.attempt, &l.value, &k.c)
	} else {
		l.keyArr = [8]string{k.w, k.r, k.ww, k.f, k.rw, k.v, k.cq, k.wt}
		l.acqKeys = l.keyArr[:]
		l.acqLine = line(buf[:0:acqCap], shaAcquireShared, l.acqKeys, &l.id, &l.ttlMS, argFalse,
			e.argQueueTTL, argFalse, &l.limit, &l.value, &k.c)
	}
	// A writer's lease leaves out :v and :cq, which only readers use.
	l.relArr = [11]string{k.w, k.r, k.ww, k.q, k.f, k.h, k.rw, k.x, k.wt, k.v, k.cq}
	l.relKeys = l.relArr[:]
	if l.mode == engine.Exclusive {
		l.relKeys = l.relArr[:9]
	}
	sha := shaReleaseExclusive
	if l.mode == engine.Shared {
		sha = shaReleaseShared
	}
	l.relLine = line(buf[acqCap:acqCap:acqCap+relCap], sha, l.relKeys, &l.id, &k.c, e.argWake,
		flag(l.value != ""))
	return l
}

// Release gives the key up with a compare-and-delete on this lease's id.
func (l *lease) Release(ctx context.Context) error {
	l.e.forget(l)
	rctx, cancel := l.e.roundTrip(ctx)
	defer cancel()
	n, err := l.e.run(rctx, l.releaseScript(), l.relLine, l.relKeys).Int64()
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
		return l.sig.NotHeld(l.key)
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

package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/kit"
)

// lease is a held Redis lease: only what its renewal, its release and
// its accessors need, so that a process holding many leases keeps little
// for each. What an Acquire needs while it runs is in attempt, dropped
// once the key is granted.
type lease struct {
	kit.LeaseCore
	e        *Engine
	id       string // the value stored on the server: engine id + sequence
	renew    bool
	hasValue bool // Request.Value was set: a writer keeps it in :x
	ttl      time.Duration

	// guarded by e.mu
	due   time.Time   // next renewal (renewed leases)
	valid time.Time   // the server keeps the key at least a margin longer than this
	timer *time.Timer // local expiry (fixed leases)
}

// attempt is an Acquire under way: the lease it will grant, and the
// script command lines every try sends, built once (see Engine.run).
// Their string and integer arguments point into this struct, so building
// them allocates no boxed values.
type attempt struct {
	*lease
	rel     relArgs
	acqLine []any
	ttlMS   int64
	limit   int64  // Request.Limit
	value   string // Request.Value
	acqKeys []string
	keyArr  [8]string
	acqBuf  [acqCap]any

	// Hand-off bookkeeping of a waiting Acquire (see the package doc,
	// "Hand-off"): n counts the acquire attempts sent, and sents keeps
	// the send times of the last len(sents) of them by attempt number
	// modulo len(sents); first is the first attempt's.
	n     int64
	sents [8]time.Time
	first time.Time
	// at is when a grant counts from: the send time of the attempt that
	// was granted, or for a hand-off the bound described in the package
	// doc. It is set by try and handedOff.
	at time.Time
	// unanswered is set when a round trip of this attempt got no answer
	// from a server that was not serving (see down): the script may still
	// run, at any time the server gets to it (see undo).
	unanswered bool
	// kept is set when an undo of this attempt may still run after its
	// Acquire returns: the attempt is then not reused.
	kept bool
}

// attempts are attempts whose Acquire has returned, for reuse: a process
// that takes and gives back locks in a loop allocates none.
var attempts = sync.Pool{New: func() any { return new(attempt) }}

// putAttempt gives a back for reuse once its Acquire has returned, unless
// an undo of it may still be running.
func (e *Engine) putAttempt(a *attempt) {
	if a.kept {
		return
	}
	*a = attempt{} // drop the lease and every pointer into it
	attempts.Put(a)
}

// undoUpTo undoes a in the background, waiting for it no longer than
// kit.UndoWait (see tryOnce).
func (e *Engine) undoUpTo(a *attempt, queued bool) {
	a.kept = true
	e.frame.RunUpTo(kit.UndoWait, func() { a.undo(queued) })
}

// rels are release command lines of held leases, for reuse.
var rels = sync.Pool{New: func() any { return new(relArgs) }}

// acqCap and relCap are the lengths of the acquire and release command
// lines: "evalsha", sha, numkeys, the keys, the arguments.
const acqCap, relCap = 3 + 8 + 10, 3 + 11 + 4

// relArgs is the release script's command line for one lease, and the
// keys it names.
type relArgs struct {
	keys lockKeys
	arr  [11]string
	buf  [relCap]any
	line []any
	ks   []string // arr, less :v and :cq for a writer, which only readers use
}

// init builds r's command line for l.
func (r *relArgs) init(l *lease) {
	k := &r.keys
	r.arr = [11]string{k.w, k.r, k.ww, k.q, k.f, k.h, k.rw, k.x, k.wt, k.v, k.cq}
	r.ks = r.arr[:]
	sha := shaReleaseShared
	if l.Mode() == engine.Exclusive {
		r.ks, sha = r.arr[:9], shaReleaseExclusive
	}
	r.line = line(r.buf[:0], sha, r.ks, &l.id, &k.c, l.e.argWake, flag(l.hasValue))
}

// args returns the script arguments of r's line.
func (r *relArgs) args() []any { return r.line[3+len(r.ks):] }

// relArgs builds the release command line of a held lease (one
// allocation for it, one for the key names).
func (l *lease) relArgs() *relArgs {
	r := &relArgs{keys: l.e.keysOf(l.Key())}
	r.init(l)
	return r
}

// life is how long after sending a grant or renewal the lease counts as
// held: its TTL less engine.Margin, so that Done closes ahead of the
// server's expiry even when this process's timers run late.
func (l *lease) life() time.Duration { return l.ttl - engine.Margin(l.ttl) }

// try runs the acquire script once. It returns (true, token) on a grant and
// (false, holder's PTTL in ms or <= 0 if unknown) otherwise.
//
// starving says the caller, a default-mode writer, has waited past the
// engine's starvation threshold and takes a place in the arrival-order
// queue.
func (a *attempt) try(ctx context.Context, wait, queued, starving bool) (bool, int64, error) {
	s, line := acquireShared, a.acqLine
	args := line[3+len(a.acqKeys):]
	if a.Mode() == engine.Exclusive {
		s = acquireExclusive
		args[2], args[3], args[5], args[6] = flag(a.e.opts.fair), flag(wait), flag(queued), flag(starving)
	} else {
		args[2], args[4] = flag(wait), flag(queued)
	}
	a.n++
	sent := time.Now()
	if a.n == 1 {
		a.first = sent
	}
	a.sents[a.n%int64(len(a.sents))] = sent
	v, err := a.e.run(ctx, s, line, a.acqKeys).Result()
	if err != nil {
		var reply goredis.Error
		if !errors.As(err, &reply) {
			a.unanswered = true // the script may yet run (see undo)
		}
		return false, 0, err
	}
	if r, ok := v.([]any); ok && len(r) >= 2 {
		code, _ := r[0].(int64)
		n, okN := r[1].(int64)
		switch {
		case okN && code == 1 && len(r) == 2:
			a.at = sent
			return true, n, nil
		case okN && code == 0 && len(r) == 2:
			return false, n, nil
		case okN && code == 2 && len(r) == 4:
			d, okD := r[2].(int64)
			at, okA := r[3].(int64)
			if okD && okA {
				a.at = a.handOffAt(at, d)
				return true, n, nil
			}
		}
	}
	return false, 0, fmt.Errorf("acquire script returned %v", v)
}

// handOffAt is when a hand-off grant counts from: the send time of the
// attempt that made the registration the release served (attempt number n;
// the first attempt's when a is unknown or too old to be kept, which is
// earlier still) plus d microseconds, the server's measure of the time from
// that registration to the grant. See the package doc, "Hand-off".
func (a *attempt) handOffAt(n, d int64) time.Time {
	base := a.first
	if n >= 1 && n <= a.n && n > a.n-int64(len(a.sents)) {
		base = a.sents[n%int64(len(a.sents))]
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

// undo removes whatever this attempt may have left: a grant whose reply
// was lost, or a place among the waiting writers, with one try bounded by
// the op timeout, and leaves the rest to the engine's sweeper.
//
// When a round trip went unanswered (the attempt's or the undo's), its
// script may still be in the server's socket buffer: a server that was
// stopped or stalled runs what it received, when it resumes, in no set
// order across connections, so an undo can run before an attempt that
// registers the waiter again, or is granted the key, and a release would
// then hand the key to a waiter that is gone, for the lease's whole TTL.
// So the sweeper sends such an undo again until the server has answered
// it, and then once more: sent after an answer, it runs after everything
// the server had received before.
func (a *attempt) undo(queued bool) {
	err := a.undoOnce(queued)
	need := 0
	switch {
	case err != nil && down(err):
		need = 2
	case a.unanswered:
		need = 1
	}
	if need == 0 {
		return
	}
	a.e.sweep.add(&cleanup{
		need: need, until: time.Now().Add(max(a.ttl, a.e.opts.queueTTL)),
		queue: func(ctx context.Context, pipe goredis.Pipeliner) []goredis.Cmder {
			var cmds []goredis.Cmder
			if queued {
				cmds = append(cmds, a.rel.leaveCmd(ctx, pipe))
			}
			return append(cmds, a.rel.releaseCmd(ctx, pipe))
		},
	})
}

// undoOnce sends undo's clean-up once, with a fresh bounded context.
func (a *attempt) undoOnce(queued bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.e.opts.timeout)
	defer cancel()
	// Leave first: once the waiter is off the queue no release can hand
	// it the key, and the release then frees a hand-off made before.
	send := func() error {
		pipe := a.e.c.Pipeline()
		if queued {
			a.rel.leaveCmd(ctx, pipe)
		}
		a.rel.releaseCmd(ctx, pipe)
		_, err := pipe.Exec(ctx)
		return err
	}
	err := send()
	if hasNoScript(err) {
		loadScripts(ctx, a.e.c)
		err = send()
	}
	return err
}

// releaseCmd queues the release script on a pipeline.
func (r *relArgs) releaseCmd(ctx context.Context, pipe goredis.Pipeliner) *goredis.Cmd {
	return r.script().EvalSha(ctx, pipe, r.ks, r.args()...)
}

// leaveCmd queues the script that takes the lease's waiter off the queue.
func (r *relArgs) leaveCmd(ctx context.Context, pipe goredis.Pipeliner) *goredis.Cmd {
	return leaveQueue.EvalSha(ctx, pipe, r.ks, r.args()...)
}

// script is the release script of r's line.
func (r *relArgs) script() *goredis.Script {
	if r.line[1] == shaReleaseExclusive {
		return releaseExclusive
	}
	return releaseShared
}

// newAttempt builds an attempt for req (a reused one where it can): its
// lease, and the keys and arguments its scripts take.
func (e *Engine) newAttempt(req engine.Request) *attempt {
	var b [48]byte
	a := attempts.Get().(*attempt)
	a.lease = &lease{
		LeaseCore: kit.NewLeaseCore(req.Key, req.Mode, req.OnLost), e: e, hasValue: req.Value != "",
		id:  string(strconv.AppendUint(append(append(b[:0], e.id...), ':'), e.seq.Add(1), 36)),
		ttl: req.TTL, renew: req.Renew,
	}
	a.rel.keys = e.keysOf(req.Key)
	k := &a.rel.keys
	a.ttlMS, a.limit, a.value = ms(a.ttl), int64(req.Limit), req.Value
	if a.Mode() == engine.Exclusive {
		a.keyArr = [8]string{k.w, k.r, k.ww, k.q, k.f, k.h, k.x, k.wt}
		a.acqKeys = a.keyArr[:]
		a.acqLine = line(a.acqBuf[:0], shaAcquireExclusive, a.acqKeys, &a.id, &a.ttlMS, argFalse,
			argFalse, e.argQueueTTL, argFalse, argFalse, &a.n, &a.value, &k.c)
	} else {
		a.keyArr = [8]string{k.w, k.r, k.ww, k.f, k.rw, k.v, k.cq, k.wt}
		a.acqKeys = a.keyArr[:]
		a.acqLine = line(a.acqBuf[:0], shaAcquireShared, a.acqKeys, &a.id, &a.ttlMS, argFalse,
			e.argQueueTTL, argFalse, &a.limit, &a.value, &k.c)
	}
	a.rel.init(a.lease)
	return a
}

// Release gives the key up with a compare-and-delete on this lease's id.
func (l *lease) Release(ctx context.Context) error {
	l.e.forget(l)
	rctx, cancel := l.e.roundTrip(ctx)
	defer cancel()
	r := rels.Get().(*relArgs)
	r.keys = l.e.keysOf(l.Key())
	r.init(l)
	n, err := l.e.run(rctx, r.script(), r.line, r.ks).Int64()
	*r = relArgs{}
	rels.Put(r)
	switch {
	case err != nil:
		// Unknown whether it still holds; it is no longer renewed, so it
		// is lost either way. The key is given back in the background as
		// soon as the server answers again (releaseLater).
		l.Signal.Close(fmt.Errorf("%w: release failed: %w", engine.ErrLeaseLost, err))
		l.e.releaseLater(l)
		return l.e.opError(ctx, "release", l.Key(), err)
	case n == 1:
		l.Signal.Close(engine.ErrReleased)
		return nil
	default:
		if l.e.marked([]*lease{l})[0] {
			l.Signal.Close(fmt.Errorf("%w: its release found %q freed", engine.ErrReleasedByOperator, l.Key()))
		}
		return l.Signal.NotHeld(l.Key())
	}
}

// releaseLater has the engine's sweeper give back the key of l, whose
// release got no answer (the server was slow or away, or the caller's
// context ended), until the server answers (the compare-and-delete frees
// the key if l still holds it, and does nothing otherwise) or the validity
// l had runs out (the server expires the key by then). Without it, a
// release lost to a blip would keep every waiter of the key waiting out
// the lease's TTL.
func (e *Engine) releaseLater(l *lease) {
	e.mu.Lock()
	until := l.valid
	e.mu.Unlock()
	r := l.relArgs()
	e.sweep.add(&cleanup{need: 1, until: until,
		queue: func(ctx context.Context, pipe goredis.Pipeliner) []goredis.Cmder {
			return []goredis.Cmder{r.releaseCmd(ctx, pipe)}
		}})
}

// expire ends a fixed lease when its local timer fires. Redis expires the
// key on its own, no earlier than this.
func (l *lease) expire() {
	if l.e.forget(l) {
		l.Signal.Close(engine.ErrLeaseLost)
	}
}

// lost ends a lease that a renewal could not extend.
func (l *lease) lost(cause error) {
	if l.e.forget(l) {
		l.Signal.Close(cause)
	}
}

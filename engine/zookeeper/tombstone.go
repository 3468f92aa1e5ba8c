package zookeeper

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/cerberus-go/cerberus/engine"
)

// watchReleased runs for the engine's life and keeps its one watch for
// force releases (see ForceRelease): a child watch on its session's
// tombstone folder, or an exists watch while the folder does not exist.
// Each time the watch fires, the epoch of the session ends (a new session
// has a folder of its own) or a kept tombstone is due, it reads the
// folder, ends the leases the tombstones name (takeTombstones) and sets
// the watch again. A failed read is tried again a second later (or after
// the recheck interval if shorter), once there is a session. A connection
// that drops keeps the watch: go-zookeeper sets it again on the same
// session.
func (e *Engine) watchReleased() {
	ctx := e.frame.Context()
	seen := make(map[string]time.Time)
	for {
		sid, lost, ready := e.liveSession()
		if sid == 0 {
			select {
			case <-ready:
				continue
			case <-ctx.Done():
				return
			}
		}
		ch, again, err := e.readReleased(ctx, sid, seen)
		if err != nil {
			ch, again = nil, min(e.recheck, time.Second)
		}
		if !awaitRelease(ctx, ch, lost, again) {
			return
		}
	}
}

// awaitRelease waits for the watch's event on ch, the end of the epoch
// (lost), again (if above 0) or the end of ctx; it reports false for the
// last.
func awaitRelease(ctx context.Context, ch <-chan zk.Event, lost <-chan struct{}, again time.Duration) bool {
	var due <-chan time.Time
	if again > 0 {
		t := time.NewTimer(again)
		defer t.Stop()
		due = t.C
	}
	select {
	case <-ch:
	case <-lost:
	case <-due:
	case <-ctx.Done():
		return false
	}
	return true
}

// liveSession returns the id of the engine's session and the channel
// that closes when its epoch ends, or, while there is no session, 0 and
// the channel that closes when there is one.
func (e *Engine) liveSession() (sid int64, lost, ready <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.sess.up || e.sess.id == 0 {
		return 0, nil, e.sess.ready
	}
	return e.sess.id, e.sess.lost, nil
}

// readReleased sets the watch on the tombstone folder of session sid and
// hands the tombstones it lists to takeTombstones. It returns the watch's
// channel and, while it keeps tombstones that name no lease, when to read
// again.
func (e *Engine) readReleased(ctx context.Context, sid int64, seen map[string]time.Time) (<-chan zk.Event, time.Duration, error) {
	bctx, cancel := e.bound(ctx)
	defer cancel()
	dir := e.folder(sid)
	var (
		names []string
		ch    <-chan zk.Event
		err   error
	)
	// A nil channel: the folder was created between the two calls.
	for try := 0; ch == nil && err == nil; try++ {
		if try == 3 {
			return nil, 0, fmt.Errorf("zookeeper: %s kept changing", dir)
		}
		names, ch, err = e.armChildren(bctx, dir)
	}
	if err != nil {
		return nil, 0, err
	}
	return ch, e.takeTombstones(bctx, sid, dir, names, seen), nil
}

// takeTombstones ends the engine's leases of session sid that the
// tombstones names in dir stand for, with engine.ErrReleasedByOperator,
// and deletes their tombstones. A tombstone that names no lease of the
// engine is kept for the session timeout (its node's grant may be under
// way: the lease is ended at the next read) and then deleted (its lease
// had ended). seen holds when each kept tombstone was first read. It
// returns when to read again: 0 if it keeps none.
func (e *Engine) takeTombstones(ctx context.Context, sid int64, dir string, names []string, seen map[string]time.Time) time.Duration {
	byToken := make(map[uint64]string, len(names))
	for _, n := range names {
		if _, token, ok := parseTombstone(n); ok {
			byToken[token] = n
		}
	}
	var drop []string
	for _, l := range e.leasesOf(sid, byToken) {
		l.finish(fmt.Errorf("%w: zookeeper node %s deleted by a force release", engine.ErrReleasedByOperator, l.path))
		drop = append(drop, byToken[l.Token()])
		delete(byToken, l.Token())
	}
	now, grace, kept := time.Now(), e.sessionTimeout(), false
	listed := make(map[string]bool, len(byToken))
	for _, n := range byToken {
		listed[n] = true
		first, ok := seen[n]
		switch {
		case !ok:
			seen[n], kept = now, true
		case now.Sub(first) >= grace:
			drop = append(drop, n)
		default:
			kept = true
		}
	}
	for n := range seen {
		if !listed[n] {
			delete(seen, n)
		}
	}
	e.dropTombstones(ctx, dir, drop)
	if kept {
		return grace
	}
	return 0
}

// leasesOf returns the engine's leases of session sid whose tokens are
// in byToken.
func (e *Engine) leasesOf(sid int64, byToken map[uint64]string) []*lease {
	var out []*lease
	e.mu.Lock()
	defer e.mu.Unlock()
	for l := range e.frame.AllLocked() {
		if _, ok := byToken[l.Token()]; ok && l.sid == sid {
			out = append(out, l)
		}
	}
	return out
}

// dropTombstones deletes the tombstones names in dir, ignoring failures:
// one left behind is swept by a later ForceRelease.
func (e *Engine) dropTombstones(ctx context.Context, dir string, names []string) {
	if len(names) == 0 || e.addAuth(ctx) != nil {
		return
	}
	for _, n := range names {
		_ = call(ctx, func() error { return e.conn.Delete(dir+"/"+n, -1) })
	}
}

// isReleased reports whether p is the tombstone folders' path or under
// it.
func (e *Engine) isReleased(p string) bool {
	rest, ok := strings.CutPrefix(p, e.released)
	return ok && (rest == "" || rest[0] == '/')
}

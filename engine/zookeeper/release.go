package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Releaser = (*Engine)(nil)

// Tombstones. ForceRelease deletes the holding nodes of a key and, in the
// same multi, creates a persistent node for each in the folder of the
// session that owned it (the node's ephemeralOwner):
//
//	<base>/%released/<session id, 16 hex digits>/<unix ms>-<czxid>
//
// The folders are container nodes, made beforehand if missing.
// "%released" is no encoded key (EncodeKey writes '%' only before two hex
// digits), so List never shows it and no key's lock node can take its
// name. Each engine keeps one watch on its own session's folder
// (watchReleased), reads the tombstones when it fires, ends the leases
// they name with engine.ErrReleasedByOperator and deletes them. A
// tombstone nobody read (its holder's session had ended) is deleted by a
// later ForceRelease once older than tombstoneLife, longer than any
// session timeout the engine accepts.
const (
	releasedDir   = "%released"
	tombstoneLife = 10 * time.Minute
)

// releaseTries bounds the listings of one ForceRelease whose holders
// change under it.
const releaseTries = 5

// Bounds of the sweep of old tombstones in one ForceRelease.
const (
	sweepFolders = 8
	sweepDeletes = 64
)

// ForceRelease frees key whoever holds it; see engine.Releaser and the
// package documentation ("Force release"). One listing of the key's
// queue, a read of each holding node, a create of each holder's
// tombstone folder (ignored if it exists) and one multi that deletes the
// nodes and writes their tombstones; if a holder left meanwhile, it lists
// again, up to releaseTries times. The next waiter's watch on the deleted
// node fires at once. Then it sweeps a few old tombstones.
func (e *Engine) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	bctx, cancel := e.bound(ctx)
	defer cancel()
	parent := e.base + "/" + EncodeKey(key)
	for range releaseTries {
		hs, nodes, err := e.freeOnce(bctx, parent)
		if errors.Is(err, zk.ErrNoNode) {
			continue // a holder left, or a folder was removed meanwhile
		}
		if err != nil {
			return nil, e.opError(ctx, "force release", key, err)
		}
		if len(hs) == 0 {
			return nil, fmt.Errorf("%w: %q: nobody holds it", engine.ErrNotHeld, key)
		}
		e.endReleased(nodes)
		e.sweep(bctx)
		return hs, nil
	}
	return nil, e.opError(ctx, "force release", key,
		fmt.Errorf("the holders kept changing over %d tries", releaseTries))
}

// freeOnce is one try of ForceRelease: it returns the holders it freed
// and their nodes' paths, or zk.ErrNoNode if one of them was gone first.
func (e *Engine) freeOnce(ctx context.Context, parent string) ([]engine.Holder, []string, error) {
	var children []string
	err := call(ctx, func() (err error) { children, _, err = e.conn.Children(parent); return err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	nodes := holding(children)
	if len(nodes) == 0 {
		return nil, nil, nil
	}
	reads, err := e.readNodes(ctx, parent, nodes)
	if err != nil {
		return nil, nil, err
	}
	if err := e.makeFolders(ctx, reads); err != nil {
		return nil, nil, err
	}
	ms := time.Now().UnixMilli()
	hs := make([]engine.Holder, len(nodes))
	paths := make([]string, len(nodes))
	ops := make([]any, 0, 2*len(nodes))
	for i, n := range nodes {
		hs[i], paths[i] = reads[i].Holder, parent+"/"+n.name
		ops = append(ops, &zk.CreateRequest{Path: e.tombstone(reads[i].owner, ms, hs[i].Token), Acl: e.acl},
			&zk.DeleteRequest{Path: paths[i], Version: -1})
	}
	err = call(ctx, func() error { _, err := e.conn.Multi(ops...); return err })
	return hs, paths, err
}

// makeFolders creates the tombstone folder of each holder's session,
// once per session. It returns zk.ErrNoNode if a holding node was gone
// when read.
func (e *Engine) makeFolders(ctx context.Context, reads []nodeRead) error {
	made := make(map[int64]bool, 1)
	for _, r := range reads {
		if r.gone {
			return zk.ErrNoNode
		}
		if !made[r.owner] {
			if err := e.makeFolder(ctx, e.folder(r.owner)); err != nil {
				return err
			}
			made[r.owner] = true
		}
	}
	return nil
}

// makeFolder creates the container dir, and "%released" first if it is
// missing. A folder that exists is left as it is.
func (e *Engine) makeFolder(ctx context.Context, dir string) error {
	err := e.makeContainer(ctx, dir)
	if errors.Is(err, zk.ErrNoNode) {
		if err = e.makeContainer(ctx, e.released); err == nil {
			err = e.makeContainer(ctx, dir)
		}
	}
	return err
}

// makeContainer creates a container node at p; one that exists already
// is no error.
func (e *Engine) makeContainer(ctx context.Context, p string) error {
	err := call(ctx, func() error { _, err := e.conn.CreateContainer(p, nil, zk.FlagContainer, e.acl); return err })
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// folder returns the path of the tombstone folder of session sid.
func (e *Engine) folder(sid int64) string {
	return fmt.Sprintf("%s/%016x", e.released, uint64(sid))
}

// tombstone returns the path of the tombstone of the node with czxid
// token, owned by session sid, written at ms (unix milliseconds).
func (e *Engine) tombstone(sid, ms int64, token uint64) string {
	return e.folder(sid) + "/" + strconv.FormatInt(ms, 10) + "-" + strconv.FormatUint(token, 10)
}

// parseTombstone splits a tombstone's name into its time (unix
// milliseconds) and the czxid of the node it stands for.
func parseTombstone(name string) (ms int64, token uint64, ok bool) {
	t, z, ok := strings.Cut(name, "-")
	if !ok {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseInt(t, 10, 64)
	token, err2 := strconv.ParseUint(z, 10, 64)
	return ms, token, err1 == nil && err2 == nil
}

// endReleased ends the engine's own leases on the nodes at paths with
// engine.ErrReleasedByOperator, at once; their tombstones are deleted by
// the engine's watch (see takeTombstones).
func (e *Engine) endReleased(paths []string) {
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		want[p] = true
	}
	var ended []*lease
	e.mu.Lock()
	for l := range e.frame.AllLocked() {
		if want[l.path] {
			ended = append(ended, l)
		}
	}
	e.mu.Unlock()
	for _, l := range ended {
		l.finish(engine.ErrReleasedByOperator)
	}
}

// sweep deletes old tombstones: those older than tombstoneLife, which
// their holders never read (their session had ended), and session folders
// empty for that long (the server removes a container only once it has
// had children). It looks at up to sweepFolders folders, from a random
// one on, and deletes up to sweepDeletes nodes. Errors are ignored: the
// next ForceRelease sweeps again. The times are those of the clocks of
// the processes that wrote them.
func (e *Engine) sweep(ctx context.Context) {
	var dirs []string
	err := call(ctx, func() (err error) { dirs, _, err = e.conn.Children(e.released); return err })
	if err != nil || len(dirs) == 0 {
		return
	}
	cutoff := time.Now().Add(-tombstoneLife)
	budget := sweepDeletes
	start := rand.IntN(len(dirs))
	for i := 0; i < min(len(dirs), sweepFolders) && budget > 0; i++ {
		budget -= e.sweepFolder(ctx, e.released+"/"+dirs[(start+i)%len(dirs)], cutoff, budget)
	}
}

// sweepFolder deletes up to budget tombstones in dir written before
// cutoff, or dir itself if it is empty and older; it returns how many
// deletes it sent.
func (e *Engine) sweepFolder(ctx context.Context, dir string, cutoff time.Time, budget int) int {
	var (
		names []string
		st    *zk.Stat
	)
	if call(ctx, func() (err error) { names, st, err = e.conn.Children(dir); return err }) != nil {
		return 0
	}
	var old []string
	for _, n := range names {
		if ms, _, ok := parseTombstone(n); ok && time.UnixMilli(ms).Before(cutoff) {
			old = append(old, dir+"/"+n)
		}
	}
	if len(names) == 0 && st != nil && time.UnixMilli(st.Ctime).Before(cutoff) {
		old = append(old, dir)
	}
	old = old[:min(len(old), budget)]
	for _, p := range old {
		_ = call(ctx, func() error { return e.conn.Delete(p, -1) })
	}
	return len(old)
}

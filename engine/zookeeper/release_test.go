package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestForceRelease runs enginetest.RunRelease, then
// enginetest.RunPausedRelease with a holder process, under a base path of
// the test's own.
func TestForceRelease(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	base := testBase(t, rawConn(t, addr))
	newEngine := func() (engine.Engine, error) {
		return zookeeper.Dial([]string{addr}, zookeeper.WithSessionTimeout(testTimeout), zookeeper.WithPrefix(base), zookeeper.WithLogger(quiet{}))
	}
	enginetest.RunRelease(t, newEngine)
	enginetest.RunPausedRelease(t, newEngine, holderAddrEnv+"="+addr, holderBaseEnv+"="+base)
}

// folderOf returns the tombstone folder of e's session.
func folderOf(e *zookeeper.Engine) string {
	return fmt.Sprintf("%s/%%released/%016x", e.Prefix(), uint64(e.SessionID()))
}

// mkTombstone creates the node at p, and its folders as ForceRelease
// does, failing the test on errors.
func mkTombstone(t *testing.T, c *zk.Conn, p string) {
	t.Helper()
	for _, dir := range []string{path.Dir(path.Dir(p)), path.Dir(p)} {
		if _, err := c.CreateContainer(dir, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", dir, err)
		}
	}
	if _, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create %s: %v", p, err)
	}
}

// exists reports whether p exists, failing the test on errors.
func exists(t *testing.T, c *zk.Conn, p string) bool {
	t.Helper()
	ok, _, err := c.Exists(p)
	if err != nil {
		t.Fatalf("exists %s: %v", p, err)
	}
	return ok
}

// TestTombstones: a force release writes the holder's tombstone in its
// session's folder, which the holder's engine reads (its lease ends with
// engine.ErrReleasedByOperator) and deletes; a ForceRelease sweeps
// tombstones older than ten minutes, of any session, and keeps younger
// ones; the folders are no key in List.
func TestTombstones(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	holder := dial(t, addr, zookeeper.WithPrefix(base))
	op := dial(t, addr, zookeeper.WithPrefix(base))
	l := mustAcquire(t, holder, try("k"))
	gone := base + "/%released/00000000000000aa" // a session long gone
	old := fmt.Sprintf("%s/%d-1", gone, time.Now().Add(-11*time.Minute).UnixMilli())
	young := fmt.Sprintf("%s/%d-2", gone, time.Now().UnixMilli())
	mkTombstone(t, admin, old)
	mkTombstone(t, admin, young)

	hs, err := op.ForceRelease(bounded(t, time.Minute), "k")
	if err != nil || len(hs) != 1 || hs[0].Token != l.Token() {
		t.Fatalf("ForceRelease(k) = %v, %v; want the holder with token %d", hs, err, l.Token())
	}
	if exists(t, admin, old) || !exists(t, admin, young) {
		t.Errorf("after a ForceRelease: %s exists %v (want false), %s exists %v (want true)",
			old, exists(t, admin, old), young, exists(t, admin, young))
	}
	waitDone(t, l, 10*time.Second, "force release")
	if !errors.Is(l.Err(), engine.ErrReleasedByOperator) {
		t.Errorf("Err() = %v; want engine.ErrReleasedByOperator", l.Err())
	}
	dir := folderOf(holder)
	for deadline := time.Now().Add(10 * time.Second); len(children(t, admin, dir)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the holder left its tombstones %v in %s", children(t, admin, dir), dir)
		}
	}
	other := mustAcquire(t, op, try("other"))
	defer other.Release(context.Background())
	inv, err := op.List(bounded(t, time.Minute), "*", 100)
	if err != nil || len(inv.Keys) != 1 || inv.Keys[0].Key != "other" {
		t.Errorf("List = %+v, %v; want the key other alone", inv, err)
	}
}

// TestUnmatchedTombstone: a tombstone in an engine's folder that names no
// lease of it is kept for the session timeout (a grant of its node may
// be under way) and then deleted; one that names a held lease ends it at
// once with engine.ErrReleasedByOperator.
func TestUnmatchedTombstone(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	e := dial(t, addr, zookeeper.WithPrefix(base))
	l := mustAcquire(t, e, try("k"))
	stray := fmt.Sprintf("%s/%d-1", folderOf(e), time.Now().UnixMilli())
	mkTombstone(t, admin, stray)
	time.Sleep(2 * time.Second) // the engine reads it at once
	if !exists(t, admin, stray) {
		t.Fatalf("%s, naming no lease, was deleted before the session timeout (%v)", stray, testTimeout)
	}
	mine := fmt.Sprintf("%s/%d-%d", folderOf(e), time.Now().UnixMilli(), l.Token())
	mkTombstone(t, admin, mine)
	waitDone(t, l, 5*time.Second, "its tombstone")
	if !errors.Is(l.Err(), engine.ErrReleasedByOperator) {
		t.Errorf("Err() = %v; want engine.ErrReleasedByOperator", l.Err())
	}
	for deadline := time.Now().Add(3 * testTimeout); exists(t, admin, stray) || exists(t, admin, mine); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("tombstones left %v after %v", children(t, admin, folderOf(e)), 3*testTimeout)
		}
	}
}

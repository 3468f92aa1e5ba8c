package consul_test

import (
	"bytes"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine/consul"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// TestDevAgentTokensAfterRestart: a dev agent keeps its store in memory;
// grants, a kill -9 and restart (empty), more grants on the same engine and
// on a fresh one. Contract 5 wants them above the last token: the key's
// fencing counter is lost with the store and starts again from the clock.
func TestDevAgentTokensAfterRestart(t *testing.T) {
	ag := testenv.StartConsul(t)
	e := newEngine(t, ag.Addr, consul.WithLockDelay(0))
	key := testKey(t)
	last := cycles(t, e, key, 50, 0)
	ag.Kill()
	ag.Restart()
	t.Logf("last token before the restart: %d", last)
	cycles(t, e, key, 3, last)
	cycles(t, newEngine(t, ag.Addr, consul.WithLockDelay(0)), key, 3, last)
}

// TestTokensAfterSnapshotRestore: grants, a snapshot, more grants, then the
// dev agent is killed, restarted empty and given the older snapshot back
// (consul snapshot restore): the key's fencing counter comes back stale,
// and the next grants, on the same engine and on a fresh one, are still
// above the last token.
func TestTokensAfterSnapshotRestore(t *testing.T) {
	ag := testenv.StartConsul(t)
	e := newEngine(t, ag.Addr, consul.WithLockDelay(0))
	key := testKey(t)
	first := cycles(t, e, key, 10, 0)
	snap, _, err := newClient(t, ag.Addr).Snapshot().Save(nil)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := io.ReadAll(snap)
	_ = snap.Close()
	if err != nil {
		t.Fatal(err)
	}
	last := cycles(t, e, key, 30, first)
	ag.Kill()
	ag.Restart()
	for deadline := time.Now().Add(restartWait); ; time.Sleep(100 * time.Millisecond) {
		err = newClient(t, ag.Addr).Snapshot().Restore(nil, bytes.NewReader(saved))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restore: %v", err)
		}
	}
	fence, _, err := newClient(t, ag.Addr).KV().Get(e.KeyDir(key)+"fence", nil)
	if c, _ := strconv.ParseUint(value(fence), 10, 64); err != nil || c < first || c >= last {
		t.Fatalf("fencing counter after the restore %q (%v); want the snapshot's, from %d to %d", value(fence), err,
			first, last)
	}
	t.Logf("last token before the restore: %d, counter restored: %s", last, value(fence))
	cycles(t, e, key, 3, last)
	cycles(t, newEngine(t, ag.Addr, consul.WithLockDelay(0)), key, 3, last)
}

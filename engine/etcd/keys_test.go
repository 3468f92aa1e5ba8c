package etcd

import (
	"strings"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
)

// TestBlocker decides grants on hand-made queues: writers wait for the
// next lower entry, readers for the next lower writer only, counted
// readers also for the count ahead.
func TestBlocker(t *testing.T) {
	w := func(rev int64) entry { return entry{name: "w" + string(rune('0'+rev)), rev: rev, write: true} }
	r := func(rev int64, limit int) entry {
		return entry{name: "r" + string(rune('0'+rev)), rev: rev, limit: limit}
	}
	for _, tc := range []struct {
		name  string
		queue []entry
		own   int64
		want  wait
	}{
		{"writer alone", []entry{w(1)}, 1, wait{granted: true}},
		{"writer behind a reader", []entry{r(1, 0), w(2)}, 2, wait{block: "r1", ahead: 1}},
		{"writer behind two", []entry{r(1, 0), r(2, 0), w(3)}, 3, wait{block: "r2", ahead: 2}},
		{"reader behind readers", []entry{r(1, 0), r(2, 0), r(3, 0)}, 3, wait{granted: true}},
		{"reader behind a writer", []entry{r(1, 0), w(2), r(3, 0)}, 3, wait{block: "w2", ahead: 1}},
		{"reader ahead of a later writer", []entry{r(1, 0), r(2, 0), w(3)}, 2, wait{granted: true}},
		{"counted within its limit", []entry{r(1, 2), r(2, 2)}, 2, wait{granted: true}},
		{"counted over its limit", []entry{r(1, 2), r(2, 2), r(3, 2)}, 3, wait{counted: true, ahead: 2}},
		{"counted behind a writer", []entry{w(1), r(2, 5)}, 2, wait{block: "w1", ahead: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found := blocker(tc.queue, tc.own)
			if !found || got != tc.want {
				t.Errorf("blocker = %+v, %v; want %+v", got, found, tc.want)
			}
		})
	}
	if _, found := blocker([]entry{w(1)}, 2); found {
		t.Error("an entry missing from the queue was found")
	}
}

// TestHolders: a leading writer alone; readers up to the first writer,
// counted ones within their limit.
func TestHolders(t *testing.T) {
	q := []entry{{rev: 1, limit: 2, value: "a"}, {rev: 2, limit: 2, value: "b"}, {rev: 3, limit: 2},
		{rev: 4, write: true}, {rev: 5}}
	got := holders(q)
	want := []engine.Holder{{Mode: engine.Shared, Token: 1, Value: "a"}, {Mode: engine.Shared, Token: 2, Value: "b"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("holders = %+v, want %+v", got, want)
	}
	if got := holders([]entry{{rev: 7, write: true, value: "leader"}, {rev: 8}}); len(got) != 1 ||
		got[0] != (engine.Holder{Mode: engine.Exclusive, Token: 7, Value: "leader"}) {
		t.Errorf("holders of a held writer = %+v", got)
	}
	if got := holders([]entry{{rev: 1}, {rev: 2, write: true}}); len(got) != 1 {
		t.Errorf("a writer behind a reader holds: %+v", got)
	}
}

// FuzzEntryName: every name parses back to its mode and limit, lies in
// its own key's queue range, and in no other key's, even a key it starts
// with.
func FuzzEntryName(f *testing.F) {
	f.Add("a", "a/b", uint64(0), true, 0)
	f.Add("order:42", "order:4", uint64(7), false, 3)
	f.Fuzz(func(t *testing.T, key, other string, slot uint64, write bool, limit int) {
		if engine.CheckKey(key, engine.MaxKeyLen) != nil || engine.CheckKey(other, engine.MaxKeyLen) != nil ||
			limit < 0 || limit > engine.MaxLimit {
			t.Skip()
		}
		e := &Engine{prefix: DefaultPrefix}
		mode := engine.Shared
		if write {
			mode, limit = engine.Exclusive, 0
		}
		queue := e.queueRange(key)
		name := entryName(queue, 0x1234, slot, mode, limit)
		en, ok := parseEntry(queue, name, 5, []byte("v"))
		if !ok || en.write != write || en.limit != limit || en.rev != 5 || en.value != "v" {
			t.Fatalf("parse(%q) = %+v, %v", name, en, ok)
		}
		if other != key && strings.HasPrefix(name, e.queueRange(other)) {
			t.Fatalf("the entry %q of %q lies in the queue of %q", name, key, other)
		}
	})
}

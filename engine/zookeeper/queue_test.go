package zookeeper

import (
	"fmt"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
)

func qname(kind string, seq int) string {
	return fmt.Sprintf("%s%032x-%s%010d", protectedPrefix, seq, kind, seq)
}

func TestBlocker(t *testing.T) {
	r := func(seq int) string { return qname(readKind, seq) }
	w := func(seq int) string { return qname(writeKind, seq) }
	queue := []string{r(1), w(2), r(3), r(4), w(5), r(6), "foreign-node", w(7)}
	cases := []struct {
		own   string
		block string
		ahead int
	}{
		{r(1), "", 0},
		{w(2), r(1), 1},
		{r(3), w(2), 1}, // waits for the writer only
		{r(4), w(2), 1}, // not for the reader between
		{w(5), r(4), 4},
		{r(6), w(5), 2}, // never for w(7), which came later
		{w(7), r(6), 6},
	}
	for _, c := range cases {
		got, found := blocker(queue, c.own)
		if !found || got.block != c.block || got.ahead != c.ahead || got.counted {
			t.Errorf("blocker(%s) = %+v, %v; want %q, %d, true", c.own, got, found, c.block, c.ahead)
		}
	}
	if _, found := blocker(queue, w(9)); found {
		t.Errorf("a node not in the queue was found")
	}
}

// TestBlockerCounted: a counted reader waits for writers ahead and then
// for the count; held back by the count, it watches the reader just ahead
// when that one is held back by the count too, and the children when every
// node ahead holds.
func TestBlockerCounted(t *testing.T) {
	c := func(seq int) string { return qname(kindOf(engine.Request{Mode: engine.Shared, Limit: 2}), seq) }
	r := func(seq int) string { return qname(readKind, seq) }
	w := func(seq int) string { return qname(writeKind, seq) }
	queue := []string{c(1), r(2), c(3), c(4), w(5), c(6), c(7), c(8)}
	cases := []struct {
		own     string
		want    wait
		granted bool
	}{
		{c(1), wait{poke: false}, true}, // r(2) is no counted reader
		{r(2), wait{before: 1, poke: true}, true},
		{c(3), wait{before: 2, counted: true, poke: true}, false}, // both ahead hold
		{c(4), wait{before: 3, block: c(3)}, false},               // c(3) waits on the count
		{w(5), wait{before: 4, ahead: 4, block: c(4), poke: true}, false},
		{c(6), wait{before: 5, ahead: 1, block: w(5), poke: true}, false},
		{c(7), wait{before: 6, ahead: 1, block: w(5), between: 1, poke: true}, false},
		{c(8), wait{before: 7, ahead: 1, block: w(5), between: 2}, false},
	}
	for _, tc := range cases {
		got, found := blocker(queue, tc.own)
		if !found || got != tc.want || got.granted() != tc.granted {
			t.Errorf("blocker(%s) = %+v (granted %v), want %+v (granted %v)", tc.own, got, got.granted(), tc.want, tc.granted)
		}
	}
	// A counted reader whose predecessor holds (an uncounted reader)
	// watches the children even when it is far behind.
	if got, _ := blocker([]string{c(1), c(2), r(3), c(4)}, c(4)); !got.counted || got.block != "" {
		t.Errorf("behind a holding reader: %+v, want a child watch", got)
	}
}

func TestParseNodeLimit(t *testing.T) {
	name := qname(kindOf(engine.Request{Mode: engine.Shared, Limit: 37}), 12)
	n, ok := parseNode(name)
	if !ok || n.write || n.limit != 37 || n.seq != 12 {
		t.Errorf("parseNode(%s) = %+v, %v", name, n, ok)
	}
	for _, bad := range []string{
		qname("limit0-read-", 1), qname("limit-read-", 1), qname("limitx-read-", 1),
		qname(fmt.Sprintf("limit%d-read-", engine.MaxLimit+1), 1),
	} {
		if n, ok := parseNode(bad); ok {
			t.Errorf("parseNode(%s) = %+v, want no queue node", bad, n)
		}
	}
}

func TestHolding(t *testing.T) {
	c := func(seq int) string { return qname("limit2-read-", seq) }
	r := func(seq int) string { return qname(readKind, seq) }
	w := func(seq int) string { return qname(writeKind, seq) }
	cases := []struct {
		queue []string
		want  []int
	}{
		{nil, nil},
		{[]string{w(3), r(1), c(2)}, []int{1, 2}}, // listing order does not matter
		{[]string{w(1), r(2)}, []int{1}},
		{[]string{c(1), c(2), c(3), r(4), w(5), r(6)}, []int{1, 2, 4}},
		{[]string{c(1), r(2), c(3)}, []int{1, 2}},
	}
	for _, tc := range cases {
		var got []int
		for _, n := range holding(tc.queue) {
			got = append(got, int(n.seq))
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("holding(%v) = %v, want %v", tc.queue, got, tc.want)
		}
	}
}

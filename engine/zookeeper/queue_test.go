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
		mode  engine.Mode
		block string
		ahead int
	}{
		{r(1), engine.Shared, "", 0},
		{w(2), engine.Exclusive, r(1), 1},
		{r(3), engine.Shared, w(2), 1}, // waits for the writer only
		{r(4), engine.Shared, w(2), 1}, // not for the reader between
		{w(5), engine.Exclusive, r(4), 4},
		{r(6), engine.Shared, w(5), 2}, // never for w(7), which came later
		{w(7), engine.Exclusive, r(6), 6},
	}
	for _, c := range cases {
		block, ahead, found := blocker(queue, c.own, c.mode)
		if !found || block != c.block || ahead != c.ahead {
			t.Errorf("blocker(%s, %v) = %q, %d, %v; want %q, %d, true", c.own, c.mode, block, ahead, found, c.block, c.ahead)
		}
	}
	if _, _, found := blocker(queue, w(9), engine.Exclusive); found {
		t.Errorf("a node not in the queue was found")
	}
}

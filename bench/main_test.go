package bench

import (
	"flag"
	"os"
	"sync"
	"testing"
	"time"
)

// Every side-by-side benchmark measures a fixed workload once, whatever
// b.N is, and prints BENCH lines; run them with -benchtime=1x (make bench
// does).
var (
	hotKeyDur    = flag.Duration("hotkey", 10*time.Second, "length of each hot-key run")
	hotKeyHold   = flag.Duration("hold", time.Millisecond, "critical section length in hot-key runs")
	hotClients   = flag.Int("clients", 16, "clients in hot-key runs, each with its own connection")
	uncontendedN = flag.Int("cycles", 2000, "lock+unlock cycles in uncontended runs")
)

// once runs body on the first call of a benchmark function only, so that a
// -benchtime other than 1x does not repeat a ten-second workload.
func once(b *testing.B, body func()) {
	b.Helper()
	if _, done := ran.LoadOrStore(b.Name(), true); done {
		return
	}
	body()
}

var ran sync.Map

// out is where BENCH lines go.
var out = os.Stdout

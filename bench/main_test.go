package bench

import (
	"context"
	"flag"
	"os"
	"strings"
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

// warm runs 50 lock+unlock cycles, so that connections, scripts and rows
// exist before anything is measured.
func warm(lock LockFunc) {
	for range 50 {
		if u, err := lock(context.Background()); err == nil {
			_ = u()
		}
	}
}

// interleavedRates runs Interleaved over libs, reports every library, and
// returns each one's rate by name with prefix removed.
func interleavedRates(b *testing.B, prefix string, libs []Cycle) map[string]float64 {
	b.Helper()
	res, err := Interleaved(*uncontendedN, libs...)
	if err != nil {
		b.Fatal(err)
	}
	rates := map[string]float64{}
	for _, l := range res {
		l.Report(out)
		rates[strings.TrimPrefix(l.Name, prefix)] = l.Rate()
	}
	return rates
}

// hotKey runs the hot-key loop for name over -clients clients, each made by
// newClient (and so with its own connection).
func hotKey(name string, newClient func() LockFunc, maxWait time.Duration) HotKeyResult {
	clients := make([]LockFunc, *hotClients)
	for i := range clients {
		clients[i] = newClient()
	}
	return HotKey(name, clients, *hotKeyHold, *hotKeyDur, maxWait)
}

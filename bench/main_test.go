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
	hotRounds    = flag.Int("rounds", 5, "rounds each interleaved hot-key run is split into")
	sqlRounds    = flag.Int("sql-rounds", 200, "rounds of fresh clients in the SQL engines' uncontended runs")
	sqlCycles    = flag.Int("sql-round-cycles", 100, "lock+unlock cycles per library and round in those runs")
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
	return reportRates(b, prefix, res, err)
}

// reportRates reports every library of res, or fails b with err, and
// returns each one's rate by name with prefix removed.
func reportRates(b *testing.B, prefix string, res []Latencies, err error) map[string]float64 {
	b.Helper()
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

// roundTB is the testing.TB of one round of roundsRates: what its clients
// register with Cleanup runs when the round ends, not the benchmark.
type roundTB struct {
	testing.TB
	cleanups []func()
}

// Cleanup registers f to run when the round ends.
func (r *roundTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

// end runs the round's clean-ups, the last registered first.
func (r *roundTB) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// roundsRates runs InterleavedRounds, -sql-rounds rounds of
// -sql-round-cycles cycles, over the clients build makes for each round
// with that round's testing.TB (their connections closed when it ends),
// reports every library, and returns each one's rate by name with prefix
// removed.
func roundsRates(b *testing.B, prefix string, build func(tb testing.TB) []Cycle) map[string]float64 {
	b.Helper()
	res, err := InterleavedRounds(*sqlRounds, *sqlCycles, func(int) ([]Cycle, func(), error) {
		tb := &roundTB{TB: b}
		return build(tb), tb.end, nil
	})
	return reportRates(b, prefix, res, err)
}

// locker builds one LockFunc per client for one library, each client with
// its own connection(s).
type locker struct {
	name  string
	build func(b testing.TB, key string) LockFunc
}

// roundClients builds and warms, for one round of roundsRates, a client of
// each of libs on the key uncontended/<name>, named prefix+name, and after
// the library named control a second client of it, named control#2, whose
// ratio to the first is the run's resolution.
func roundClients(tb testing.TB, prefix, control string, libs []locker) []Cycle {
	var out []Cycle
	for _, lib := range libs {
		names := []string{lib.name}
		if lib.name == control {
			names = append(names, control+"#2")
		}
		for _, name := range names {
			lock := lib.build(tb, "uncontended/"+name)
			warm(lock)
			out = append(out, Cycle{prefix + name, lock})
		}
	}
	return out
}

// hotKeyRounds runs the hot-key loop for every library in turn, in
// -rounds rounds of -hotkey/-rounds each (the order reversed every other
// round), so that load from elsewhere on the machine falls on every
// library alike, and returns each library's merged result by index. Each
// library keeps its -clients clients, made by newClient, across rounds.
func hotKeyRounds(names []string, newClient func(i int) LockFunc, maxWait time.Duration) []HotKeyResult {
	clients := make([][]LockFunc, len(names))
	for i := range names {
		clients[i] = make([]LockFunc, *hotClients)
		for j := range clients[i] {
			clients[i][j] = newClient(i)
		}
	}
	rounds := make([][]HotKeyResult, len(names))
	per := *hotKeyDur / time.Duration(*hotRounds)
	for r := range *hotRounds {
		for k := range names {
			i := k
			if r%2 == 1 {
				i = len(names) - 1 - k
			}
			rounds[i] = append(rounds[i], HotKey(names[i], clients[i], *hotKeyHold, per, maxWait))
		}
	}
	out := make([]HotKeyResult, len(names))
	for i, name := range names {
		out[i] = MergeHotKey(name, rounds[i])
	}
	return out
}

// hotKeyBy runs hotKeyRounds for the libraries named names (each reported
// as prefix + name), with the clients build makes for the library at each
// index, prints each library's result, and returns the results by name.
func hotKeyBy(prefix string, names []string, build func(i int) LockFunc) map[string]HotKeyResult {
	full := make([]string, len(names))
	for i, n := range names {
		full[i] = prefix + n
	}
	by := map[string]HotKeyResult{}
	for i, r := range hotKeyRounds(full, build, 30*time.Second) {
		r.Report(out)
		by[names[i]] = r
	}
	return by
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

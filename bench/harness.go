package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// LockFunc takes a lock for one client and returns the function that
// releases it. Each library under test is adapted to this shape so that the
// same loops measure all of them.
type LockFunc func(ctx context.Context) (unlock func() error, err error)

// HotKeyResult is the outcome of HotKey for one library.
type HotKeyResult struct {
	Name         string
	Acquisitions int
	Elapsed      time.Duration
	Errors       int
	WaitP50      time.Duration
	WaitP99      time.Duration
	WaitMax      time.Duration
	PerClientMin int
	PerClientMax int
	// Held is the time all clients together spent in their critical
	// sections, as measured around each section by the client.
	Held time.Duration
	// HandoffP50 and HandoffP99 are the time from a holder starting its
	// release to the next holder's Lock returning, whoever that is (the
	// releaser itself when it locks again first).
	HandoffP50, HandoffP99 time.Duration

	// The samples behind the figures, for MergeHotKey.
	waits, handoffs []time.Duration
	counts          []int
}

// Rate is acquisitions per second.
func (r HotKeyResult) Rate() float64 { return float64(r.Acquisitions) / r.Elapsed.Seconds() }

// Busy is the fraction of the run the key spent inside critical sections.
// The sections cannot overlap, so it is at most 1, and the rest is handoff:
// the time between one holder's section and the next one's.
func (r HotKeyResult) Busy() float64 { return r.Held.Seconds() / r.Elapsed.Seconds() }

// Ceiling is the acquisition rate no lock can beat on this machine: one
// critical section after another with no handoff time at all, each as long
// as the sections measured in this run (a sleep overshoots what it asks).
func (r HotKeyResult) Ceiling() float64 {
	if r.Held == 0 {
		return 0
	}
	return float64(r.Acquisitions) / r.Held.Seconds()
}

// Fairness is the per-client min/max acquisition ratio: 1 is perfectly even.
func (r HotKeyResult) Fairness() float64 {
	if r.PerClientMax == 0 {
		return 0
	}
	return float64(r.PerClientMin) / float64(r.PerClientMax)
}

// Report prints one machine-readable line per figure:
//
//	BENCH hotkey <name> <figure>=<value>
func (r HotKeyResult) Report(w io.Writer) {
	fmt.Fprintf(w, "BENCH hotkey %s acq_per_s=%.1f\n", r.Name, r.Rate())
	fmt.Fprintf(w, "BENCH hotkey %s wait_p50_ms=%.3f\n", r.Name, ms(r.WaitP50))
	fmt.Fprintf(w, "BENCH hotkey %s wait_p99_ms=%.3f\n", r.Name, ms(r.WaitP99))
	fmt.Fprintf(w, "BENCH hotkey %s wait_max_ms=%.3f\n", r.Name, ms(r.WaitMax))
	fmt.Fprintf(w, "BENCH hotkey %s per_client_min=%d\n", r.Name, r.PerClientMin)
	fmt.Fprintf(w, "BENCH hotkey %s per_client_max=%d\n", r.Name, r.PerClientMax)
	fmt.Fprintf(w, "BENCH hotkey %s fairness=%.3f\n", r.Name, r.Fairness())
	fmt.Fprintf(w, "BENCH hotkey %s errors=%d\n", r.Name, r.Errors)
	fmt.Fprintf(w, "BENCH hotkey %s busy=%.3f\n", r.Name, r.Busy())
	fmt.Fprintf(w, "BENCH hotkey %s ceiling_acq_per_s=%.1f\n", r.Name, r.Ceiling())
	fmt.Fprintf(w, "BENCH hotkey %s handoff_p50_us=%.1f\n", r.Name, us(r.HandoffP50))
	fmt.Fprintf(w, "BENCH hotkey %s handoff_p99_us=%.1f\n", r.Name, us(r.HandoffP99))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// HotKey runs one goroutine per client, each with its own LockFunc (and so
// its own connection), locking one shared key in a loop for dur, holding it
// for hold each time. A wait is the time from asking for the lock to getting
// it. Each Lock call is bounded by maxWait; a call that fails counts as an
// error and the client goes on. A handoff is the time from a holder starting
// its release to the next Lock returning: the locks exclude each other, so
// grants and releases alternate.
func HotKey(name string, clients []LockFunc, hold, dur, maxWait time.Duration) HotKeyResult {
	var (
		mu     sync.Mutex
		waits  []time.Duration
		held   time.Duration
		counts = make([]int, len(clients))
		errs   int
		wg     sync.WaitGroup
		// released is when the last release began; zero once a grant
		// has consumed it.
		hmu      sync.Mutex
		released time.Time
		handoffs []time.Duration
	)
	start := time.Now()
	stop := start.Add(dur)
	for i, lock := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			var localHeld time.Duration
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(context.Background(), maxWait)
				t0 := time.Now()
				unlock, err := lock(ctx)
				granted := time.Now()
				wait := granted.Sub(t0)
				cancel()
				if err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
					continue
				}
				hmu.Lock()
				if !released.IsZero() {
					handoffs = append(handoffs, granted.Sub(released))
					released = time.Time{}
				}
				hmu.Unlock()
				local = append(local, wait)
				counts[i]++
				t1 := time.Now()
				time.Sleep(hold)
				localHeld += time.Since(t1)
				hmu.Lock()
				released = time.Now()
				hmu.Unlock()
				if err := unlock(); err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
				}
			}
			mu.Lock()
			waits = append(waits, local...)
			held += localHeld
			mu.Unlock()
		}()
	}
	wg.Wait()
	r := HotKeyResult{Name: name, Elapsed: time.Since(start), Errors: errs, Held: held,
		waits: waits, handoffs: handoffs, counts: counts}
	r.summarize()
	return r
}

// summarize computes the figures from the samples.
func (r *HotKeyResult) summarize() {
	waits, handoffs := r.waits, r.handoffs
	slices.Sort(waits)
	r.Acquisitions = len(waits)
	if n := len(waits); n > 0 {
		r.WaitP50 = waits[n*50/100]
		r.WaitP99 = waits[min(n-1, n*99/100)]
		r.WaitMax = waits[n-1]
	}
	if len(r.counts) > 0 {
		r.PerClientMin, r.PerClientMax = slices.Min(r.counts), slices.Max(r.counts)
	}
	slices.Sort(handoffs)
	if n := len(handoffs); n > 0 {
		r.HandoffP50 = handoffs[n*50/100]
		r.HandoffP99 = handoffs[min(n-1, n*99/100)]
	}
}

// MergeHotKey combines rounds of HotKey run on the same clients (in the
// same order) into one result, as if they were one run: times and counts
// add up, per-client counts add up client by client, and the percentiles
// are taken over every round's samples.
func MergeHotKey(name string, rounds []HotKeyResult) HotKeyResult {
	m := HotKeyResult{Name: name}
	for _, r := range rounds {
		m.Elapsed += r.Elapsed
		m.Errors += r.Errors
		m.Held += r.Held
		m.waits = append(m.waits, r.waits...)
		m.handoffs = append(m.handoffs, r.handoffs...)
		if m.counts == nil {
			m.counts = make([]int, len(r.counts))
		}
		for i, c := range r.counts {
			m.counts[i] += c
		}
	}
	m.summarize()
	return m
}

// Latencies summarises lock+unlock cycle times for the uncontended figure.
type Latencies struct {
	Name   string
	Cycles int
	Total  time.Duration
	P50    time.Duration
	P99    time.Duration
}

// Cycle is one library's lock+unlock on one client, for Interleaved.
type Cycle struct {
	Name string
	Lock func(ctx context.Context) (unlock func() error, err error)
}

// Interleaved runs n lock+unlock cycles for each library, interleaved in
// chunks of 50 so that load from elsewhere on the machine falls on every
// library alike, and reports each one's rate and cycle-time percentiles.
func Interleaved(n int, libs ...Cycle) ([]Latencies, error) {
	cycles, err := interleave(n, libs)
	if err != nil {
		return nil, err
	}
	out := make([]Latencies, len(libs))
	for i, lib := range libs {
		out[i] = latencies(lib.Name, cycles[i])
	}
	return out, nil
}

// interleave runs Interleaved's cycles and returns each library's cycle
// times.
func interleave(n int, libs []Cycle) ([][]time.Duration, error) {
	ctx := context.Background()
	const chunk = 50
	cycles := make([][]time.Duration, len(libs))
	for done := 0; done < n; done += chunk {
		for i, lib := range libs {
			for range min(chunk, n-done) {
				t0 := time.Now()
				unlock, err := lib.Lock(ctx)
				if err != nil {
					return nil, fmt.Errorf("%s: lock: %w", lib.Name, err)
				}
				if err := unlock(); err != nil {
					return nil, fmt.Errorf("%s: unlock: %w", lib.Name, err)
				}
				cycles[i] = append(cycles[i], time.Since(t0))
			}
		}
	}
	return cycles, nil
}

// latencies summarises the cycle times c of the library name.
func latencies(name string, c []time.Duration) Latencies {
	slices.Sort(c)
	var total time.Duration
	for _, d := range c {
		total += d
	}
	return Latencies{Name: name, Cycles: len(c), Total: total, P50: c[len(c)*50/100],
		P99: c[min(len(c)-1, len(c)*99/100)]}
}

// InterleavedRounds is Interleaved over clients made afresh for each of
// rounds rounds: round(r) returns the libraries' clients for round r,
// warmed, and a function that closes them, which runs once the round's n
// cycles of each library have. Within a round the libraries run in an
// order drawn for it (from r), so that none is always first after the
// connections are made. Each library's figures merge its rounds; a
// library is known by its Cycle's Name.
//
// A client's connection is served by a server thread that the operating
// system places on a CPU, and on a virtual machine with few CPUs that
// placement alone moves a connection's cycle time by up to four times
// (bench/doc.go): one connection per library for a whole run measures
// where its threads landed as much as the library. Many rounds of fresh
// connections give every library the same draw.
func InterleavedRounds(rounds, n int, round func(r int) ([]Cycle, func(), error)) ([]Latencies, error) {
	var names []string
	by := map[string][]time.Duration{}
	for r := range rounds {
		libs, done, err := round(r)
		if err != nil {
			return nil, err
		}
		order := rand.New(rand.NewPCG(uint64(r), 0x5eed)).Perm(len(libs))
		shuffled := make([]Cycle, len(libs))
		for i, j := range order {
			shuffled[i] = libs[j]
		}
		cycles, err := interleave(n, shuffled)
		done()
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if _, ok := by[lib.Name]; !ok {
				names = append(names, lib.Name)
				by[lib.Name] = nil
			}
		}
		for i, lib := range shuffled {
			by[lib.Name] = append(by[lib.Name], cycles[i]...)
		}
	}
	out := make([]Latencies, 0, len(names))
	for _, name := range names {
		out = append(out, latencies(name, by[name]))
	}
	return out, nil
}

// Rate is cycles per second.
func (l Latencies) Rate() float64 { return float64(l.Cycles) / l.Total.Seconds() }

// Report prints the machine-readable lines of the uncontended figure.
func (l Latencies) Report(w io.Writer) {
	fmt.Fprintf(w, "BENCH uncontended %s cycles_per_s=%.1f\n", l.Name, l.Rate())
	fmt.Fprintf(w, "BENCH uncontended %s p50_us=%.1f\n", l.Name,
		float64(l.P50)/float64(time.Microsecond))
	fmt.Fprintf(w, "BENCH uncontended %s p99_us=%.1f\n", l.Name,
		float64(l.P99)/float64(time.Microsecond))
}

// Ratio prints "BENCH ratio <figure> <a>/<b>=<x>".
func Ratio(w io.Writer, figure, a, b string, va, vb float64) {
	if vb == 0 {
		fmt.Fprintf(w, "BENCH ratio %s %s/%s=inf\n", figure, a, b)
		return
	}
	fmt.Fprintf(w, "BENCH ratio %s %s/%s=%.2f\n", figure, a, b, va/vb)
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus"
)

// The -semaphore and -election demos. Every worker (a goroutine, in one of
// -procs processes) takes a permit of one semaphore, or campaigns once in
// one election, and while it holds the permit or leads, it enters a
// tracker: a file shared by every process (flock'ed), which counts who is
// inside, the most ever inside at once, and, for an election, whether each
// term's token is above the last. The demo passes when the most inside at
// once never exceeded the permits (1 for an election), every worker got
// in, and every term's token rose.

// trackerFile is the tracker's file in the demo's store directory.
const trackerFile = "tracker"

// tracker is the shared count of workers inside: "inside most entries
// lastToken regressions".
type tracker struct{ path string }

type trackerState struct {
	inside, most, entries int64
	last                  uint64
	regressions           int64
}

func initTracker(dir string) (tracker, error) {
	t := tracker{filepath.Join(dir, trackerFile)}
	return t, os.WriteFile(t.path, []byte("0 0 0 0 0\n"), 0o644)
}

// update applies fn to the state under an exclusive flock.
func (t tracker) update(fn func(*trackerState)) error {
	return withFlock(t.path, true, func(f *os.File) error {
		st, err := readTracker(f)
		if err != nil {
			return err
		}
		fn(&st)
		if err := f.Truncate(0); err != nil {
			return err
		}
		_, err = f.WriteAt([]byte(fmt.Sprintf("%d %d %d %d %d\n", st.inside, st.most, st.entries, st.last,
			st.regressions)), 0)
		return err
	})
}

func (t tracker) read() (trackerState, error) {
	var st trackerState
	err := withFlock(t.path, false, func(f *os.File) error {
		var err error
		st, err = readTracker(f)
		return err
	})
	return st, err
}

func readTracker(f *os.File) (trackerState, error) {
	var st trackerState
	buf := make([]byte, 128)
	k, err := f.ReadAt(buf, 0)
	if k == 0 && err != nil {
		return st, err
	}
	fields := strings.Fields(string(buf[:k]))
	if len(fields) != 5 {
		return st, fmt.Errorf("tracker file %s is malformed", f.Name())
	}
	var nums [5]int64
	for i, s := range fields {
		if nums[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return st, err
		}
	}
	st = trackerState{inside: nums[0], most: nums[1], entries: nums[2], last: uint64(nums[3]),
		regressions: nums[4]}
	return st, nil
}

// enter counts a worker in, with its lease's token when terms must rise.
func (t tracker) enter(token uint64, ordered bool) error {
	return t.update(func(st *trackerState) {
		st.inside++
		st.entries++
		st.most = max(st.most, st.inside)
		if ordered {
			if token <= st.last {
				st.regressions++
			}
			st.last = token
		}
	})
}

func (t tracker) leave() error { return t.update(func(st *trackerState) { st.inside-- }) }

// primitiveName is the semaphore's or election's name in a run.
func primitiveName(run string) string { return "cerberus-demo/" + run }

// runHolders runs workers index, index+step, ... below cfg.buyers of a
// -semaphore or -election demo, each in its own goroutine.
func runHolders(ctx context.Context, cfg demoConfig, tr tracker, run string, index, step int,
	t *tally) error {
	eng, err := newEngine(cfg.engine)
	if err != nil {
		return err
	}
	c, err := cerberus.New(eng)
	if err != nil {
		_ = eng.Close()
		return err
	}
	defer c.Close()
	sem := c.Semaphore(primitiveName(run), cfg.semaphore)
	el := c.Election(primitiveName(run))
	var wg sync.WaitGroup
	for i := index; i < cfg.buyers; i += step {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var l *cerberus.Lease
			var err error
			if cfg.election {
				l, err = el.Campaign(ctx, fmt.Sprintf("worker-%d", i))
			} else {
				l, err = sem.Acquire(ctx)
			}
			if err != nil {
				t.fail(err)
				return
			}
			t.acquisitions.Add(1)
			if err := tr.enter(l.Token(), cfg.election); err != nil {
				t.fail(err)
			}
			time.Sleep(cfg.hold)
			if err := tr.leave(); err != nil {
				t.fail(err)
			}
			if err := l.Unlock(context.WithoutCancel(ctx)); err != nil {
				t.fail(err)
			}
		}()
	}
	wg.Wait()
	return nil
}

// primitivesMain runs a -semaphore or -election demo and returns the exit
// code.
func primitivesMain(ctx context.Context, cfg demoConfig, run string, stdout, stderr io.Writer) int {
	what, limit := fmt.Sprintf("semaphore of %d permits", cfg.semaphore), int64(cfg.semaphore)
	if cfg.election {
		what, limit = "election", 1
	}
	fmt.Fprintf(stdout, "%s demo: engine %s, %d workers over %d process(es), each holding for %v\n",
		what, cfg.engine, cfg.buyers, cfg.procs, cfg.hold)
	dir, err := os.MkdirTemp("", "cerberus-demo-")
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl demo: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cfg.storeDir = dir
	tr, err := initTracker(dir)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl demo: %v\n", err)
		return 1
	}
	stopObserver := func() int { return -1 }
	if cfg.election {
		stopObserver = observe(ctx, cfg.engine, run)
	}
	var t tally
	start := time.Now()
	if cfg.procs == 1 {
		err = runHolders(ctx, cfg, tr, run, 0, 1, &t)
	} else {
		err = runWorkers(ctx, cfg, run, &t, stderr)
	}
	elapsed := time.Since(start)
	seen := stopObserver()
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl demo: %v\n", err)
		return 1
	}
	st, err := tr.read()
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl demo: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%d grants in %v; most holders at once: %d (limit %d); errors: %d\n",
		t.acquisitions.Load(), elapsed.Round(time.Millisecond), st.most, limit, t.failed.Load())
	if first := t.firstErr.Load(); first != nil {
		fmt.Fprintf(stdout, "first error: %v\n", first)
	}
	ok := t.failed.Load() == 0 && st.most <= limit && st.entries == int64(cfg.buyers)
	if cfg.election {
		fmt.Fprintf(stdout, "terms whose token was not above the last: %d\n", st.regressions)
		if seen >= 0 {
			fmt.Fprintf(stdout, "an observer in this process saw %d leaders (Observe skips those it had no time to see)\n", seen)
		}
		ok = ok && st.regressions == 0
	}
	if !ok {
		fmt.Fprintln(stdout, "FAIL")
		return 1
	}
	fmt.Fprintln(stdout, "PASS")
	return 0
}

// observe follows the run's election from a client of its own, and
// returns a function that stops it and says how many leaders it saw (-1
// when it could not observe).
func observe(ctx context.Context, engineName, run string) func() int {
	c, err := observer(engineName)
	if err != nil || !crossProcess(engineName) { // a memory engine of its own would see nothing
		if c != nil {
			_ = c.Close()
		}
		return func() int { return -1 }
	}
	octx, cancel := context.WithCancel(ctx)
	changes := c.Election(primitiveName(run)).Observe(octx)
	seen := make(chan int, 1)
	go func() {
		n := 0
		for range changes {
			n++
		}
		seen <- n
	}()
	return func() int {
		cancel()
		n := <-seen
		_ = c.Close()
		return n
	}
}

// observer makes a client of its own for the election's observer.
func observer(name string) (*cerberus.Client, error) {
	eng, err := newEngine(name)
	if err != nil {
		return nil, err
	}
	c, err := cerberus.New(eng)
	if err != nil {
		_ = eng.Close()
	}
	return c, err
}

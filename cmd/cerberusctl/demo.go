package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cerberus-go/cerberus"
)

// workerCommand is the hidden subcommand a demo runs in each child process.
const workerCommand = "demo-worker"

// demoConfig is what the demo flags set.
type demoConfig struct {
	engine   string
	buyers   int
	products int
	stock    int64
	procs    int
	failover bool
	store    string // "memory" or "file"
	storeDir string // the file store's directory
	timeout  time.Duration

	// -semaphore N and -election run those demos instead of the seckill
	// (primitives.go); hold is how long each worker holds.
	semaphore int
	election  bool
	hold      time.Duration
}

func (c *demoConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.engine, "engine", "memory", "lock engine: "+strings.Join(engineNames, ", "))
	fs.IntVar(&c.buyers, "buyers", 1000, "concurrent buyers; buyer i buys product i mod -products")
	fs.IntVar(&c.products, "products", 2, "products on sale")
	fs.Int64Var(&c.stock, "stock", 10000, "initial stock of each product")
	fs.IntVar(&c.procs, "procs", 1,
		"OS processes to spread the buyers over (needs a cross-process engine)")
	fs.StringVar(&c.store, "store", "",
		"where the stock lives: memory (one process) or file (default: file when -procs > 1)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up after this long")
	fs.BoolVar(&c.failover, "failover", false,
		"run on Redis with ZooKeeper as the secondary, block Redis halfway and show the switch")
	fs.IntVar(&c.semaphore, "semaphore", 0,
		"instead of the seckill: each of -buyers workers takes a permit of one semaphore of this many permits")
	fs.BoolVar(&c.election, "election", false,
		"instead of the seckill: each of -buyers workers campaigns once in one election, leads, and resigns")
	fs.DurationVar(&c.hold, "hold", 5*time.Millisecond, "with -semaphore or -election: how long each worker holds")
}

// primitive reports whether the flags ask for the -semaphore or -election
// demo.
func (c *demoConfig) primitive() bool { return c.semaphore != 0 || c.election }

// check validates the flags before anything is started.
func (c *demoConfig) check() error {
	var errs []error
	if c.buyers < 1 {
		errs = append(errs, fmt.Errorf("-buyers must be at least 1, got %d", c.buyers))
	}
	if c.products < 1 {
		errs = append(errs, fmt.Errorf("-products must be at least 1, got %d", c.products))
	}
	if c.stock < 0 {
		errs = append(errs, fmt.Errorf("-stock must not be negative, got %d", c.stock))
	}
	if c.procs < 1 || c.procs > 64 {
		errs = append(errs, fmt.Errorf("-procs must be between 1 and 64, got %d", c.procs))
	}
	if c.timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout must be positive, got %v", c.timeout))
	}
	if c.semaphore < 0 || c.semaphore > 10000 {
		errs = append(errs, fmt.Errorf("-semaphore must be between 1 and 10000, got %d", c.semaphore))
	}
	if c.semaphore != 0 && c.election {
		errs = append(errs, errors.New("-semaphore and -election are two demos: pick one"))
	}
	if c.primitive() && (c.failover || c.hold < 0 || c.hold > time.Minute) {
		errs = append(errs, errors.New("-semaphore and -election take -hold between 0 and 1m, and no -failover"))
	}
	if c.failover && (c.procs != 1 || c.engine != "memory" || c.store == "file") {
		errs = append(errs, errors.New("-failover runs in one process on Redis then ZooKeeper: leave "+
			"-procs, -engine and -store alone"))
	}
	if c.store == "" {
		c.store = "memory"
		if c.procs > 1 {
			c.store = "file"
		}
	}
	if c.store != "memory" && c.store != "file" {
		errs = append(errs, fmt.Errorf("-store must be memory or file, got %q", c.store))
	}
	if c.procs > 1 && c.store == "memory" {
		errs = append(errs, errors.New("-store memory cannot be shared by several processes; use -store "+
			"file"))
	}
	if _, err := newEngineChecked(c.engine); err != nil {
		errs = append(errs, err)
	} else if c.procs > 1 && !crossProcess(c.engine) {
		errs = append(errs, fmt.Errorf("engine %q locks within one process only; -procs %d needs a "+
			"server engine", c.engine, c.procs))
	}
	return errors.Join(errs...)
}

// newEngineChecked validates an engine name without building the engine.
func newEngineChecked(name string) (string, error) {
	for _, n := range engineNames {
		if n == name {
			return name, nil
		}
	}
	_, err := newEngine(name)
	return "", err
}

// tally counts what the buyers did.
type tally struct {
	acquisitions atomic.Int64 // locks granted
	sold         atomic.Int64 // decrements written
	fenced       atomic.Int64 // writes refused by the fence
	failed       atomic.Int64 // lock or store errors
	retried      atomic.Int64 // locks asked for again after ErrUnavailable
	unreleased   atomic.Int64 // unlocks that got no answer (ErrUnavailable)
	firstErr     atomic.Value
}

func (t *tally) fail(err error) {
	t.failed.Add(1)
	t.firstErr.CompareAndSwap(nil, err.Error())
}

func (t *tally) line() string {
	return fmt.Sprintf("acquisitions=%d sold=%d fenced=%d failed=%d retried=%d unreleased=%d",
		t.acquisitions.Load(), t.sold.Load(), t.fenced.Load(), t.failed.Load(), t.retried.Load(),
		t.unreleased.Load())
}

// buy runs one buyer: lock the product, read, decrement, fenced write,
// unlock. A lock the engine could not serve for the moment
// (ErrUnavailable: a round trip past the engine's op timeout on a busy
// server, say) is asked for again, as a service would (lockRetrying). An
// unlock that got no answer is counted, not failed: the buyer's purchase is
// written, and the key is free again once the engine's release gets
// through or, at the latest, when the lease's TTL runs out.
func buy(ctx context.Context, c *cerberus.Client, st stock, key string, product int, t *tally) {
	l, err := lockRetrying(ctx, c, key, t)
	if err != nil {
		t.fail(err)
		return
	}
	defer func() {
		switch err := l.Unlock(context.WithoutCancel(ctx)); {
		case errors.Is(err, cerberus.ErrUnavailable):
			t.unreleased.Add(1)
		case err != nil:
			t.fail(err)
		}
	}()
	t.acquisitions.Add(1)
	n, err := st.Read(ctx, product)
	if err != nil {
		t.fail(err)
		return
	}
	if n <= 0 {
		return // sold out
	}
	switch err := st.Write(ctx, product, n-1, l.Token()); {
	case errors.Is(err, errFenced):
		t.fenced.Add(1)
	case err != nil:
		t.fail(err)
	default:
		t.sold.Add(1)
	}
}

// lockRetrying is c.Lock, asked again up to four times after
// ErrUnavailable, waiting 50ms the first time and twice as long each time
// after: a server that stays unavailable fails the buyer, rather than have
// every buyer ask again and again.
func lockRetrying(ctx context.Context, c *cerberus.Client, key string, t *tally) (*cerberus.Lease, error) {
	pause := 50 * time.Millisecond
	for try := 1; ; try++ {
		l, err := c.Lock(ctx, key)
		if err == nil || !errors.Is(err, cerberus.ErrUnavailable) || ctx.Err() != nil || try == 5 {
			return l, err
		}
		t.retried.Add(1)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, err
		}
		pause *= 2
	}
}

// runBuyers runs the buyers numbered index, index+step, ... below total,
// each in its own goroutine, and waits for them.
func runBuyers(ctx context.Context, cfg demoConfig, st stock, run string, index, step int,
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
	var wg sync.WaitGroup
	for i := index; i < cfg.buyers; i += step {
		product := i % cfg.products
		key := "cerberus-demo/" + run + "/product/" + strconv.Itoa(product)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buy(ctx, c, st, key, product, t)
		}()
	}
	wg.Wait()
	return nil
}

func demoMain(args []string, stdout, stderr io.Writer) int {
	var cfg demoConfig
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.flags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := cfg.check(); err != nil {
		fmt.Fprintf(stderr, "cerberusctl demo: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	run := newRunID()
	if cfg.failover {
		return failoverDemoMain(ctx, cfg, stdout, stderr)
	}
	if cfg.primitive() {
		return primitivesMain(ctx, cfg, run, stdout, stderr)
	}

	fmt.Fprintf(stdout, "seckill demo: engine %s, %d buyers over %d process(es), %d products with %d "+
		"stock each\n",
		cfg.engine, cfg.buyers, cfg.procs, cfg.products, cfg.stock)
	st, read, cleanup, err := openStock(ctx, &cfg)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl demo: %v\n", err)
		return 1
	}
	defer cleanup()
	var t tally
	start := time.Now()
	if cfg.procs == 1 {
		err = runBuyers(ctx, cfg, st, run, 0, 1, &t)
	} else {
		err = runWorkers(ctx, cfg, run, &t, stderr)
	}
	elapsed := time.Since(start)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl demo: %v\n", err)
		return 1
	}

	n := t.acquisitions.Load()
	fmt.Fprintf(stdout, "%d acquisitions in %v: %.0f acquisitions/s; fenced writes refused: %d; "+
		"errors: %d; locks asked again after ErrUnavailable: %d; unlocks unanswered (ErrUnavailable): %d\n",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), t.fenced.Load(),
		t.failed.Load(), t.retried.Load(), t.unreleased.Load())
	if first := t.firstErr.Load(); first != nil {
		fmt.Fprintf(stdout, "first error: %v\n", first)
	}
	return finish(stdout, stderr, cfg, read, t.failed.Load() == 0 && t.fenced.Load() == 0, t.failed.Load())
}

// failoverDemoMain is demoMain with -failover: see runFailoverDemo.
func failoverDemoMain(ctx context.Context, cfg demoConfig, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "seckill demo with failover: redis, then zookeeper; %d buyers, %d products "+
		"with %d stock each\n",
		cfg.buyers, cfg.products, cfg.stock)
	st, t, err := runFailoverDemo(ctx, cfg, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl demo: %v\n", err)
		return 1
	}
	return finish(stdout, stderr, cfg,
		func(p int) (int64, error) { return st.Read(ctx, p) }, t.failed.Load() == 0, t.failed.Load())
}

// openStock makes the stock cfg.store names, and read, which reads what is
// left of a product. A file stock lives in a temporary directory, which
// it sets as cfg.storeDir and cleanup removes.
func openStock(ctx context.Context,
	cfg *demoConfig) (st stock, read func(p int) (int64, error), cleanup func(), err error) {
	if cfg.store == "memory" {
		ms := newMemStock(cfg.products, cfg.stock)
		return ms, func(p int) (int64, error) { return ms.Read(ctx, p) }, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "cerberus-demo-")
	if err != nil {
		return nil, nil, nil, err
	}
	fst, err := initFileStock(dir, cfg.products, cfg.stock)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	cfg.storeDir = dir
	read = func(p int) (int64, error) { return fst.Read(ctx, p) }
	return fst, read, func() { _ = os.RemoveAll(dir) }, nil
}

// finish prints each product's stock against what it must be and the
// verdict, and returns the exit code. failed counts the buyers that got
// no lock or could not write: their stock is left, so a product of theirs
// shows more than it must.
func finish(stdout, stderr io.Writer, cfg demoConfig,
	read func(p int) (int64, error), ok bool, failed int64) int {
	for p := range cfg.products {
		want := max(cfg.stock-int64(buyersOf(cfg, p)), 0)
		got, err := read(p)
		if err != nil {
			fmt.Fprintf(stderr, "cerberusctl demo: reading stock of product %d: %v\n", p, err)
			return 1
		}
		mark := "ok"
		if got != want {
			mark, ok = "WRONG", false
		}
		fmt.Fprintf(stdout, "product %d: stock %d (want %d) %s\n", p, got, want, mark)
	}
	if !ok && failed > 0 {
		fmt.Fprintf(stdout, "FAIL: %d buyers got no lock or could not write (the first error is above)\n",
			failed)
		return 1
	}
	if !ok {
		fmt.Fprintln(stdout, "FAIL: the lock did not keep the stock consistent")
		return 1
	}
	fmt.Fprintln(stdout, "PASS")
	return 0
}

// buyersOf counts the buyers of product p.
func buyersOf(cfg demoConfig, p int) int {
	n := cfg.buyers / cfg.products
	if p < cfg.buyers%cfg.products {
		n++
	}
	return n
}

func newRunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runWorkers starts one child process per -procs, each running its share of
// the buyers against the shared file stock, and adds up their tallies.
func runWorkers(ctx context.Context, cfg demoConfig, run string, t *tally, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	type child struct {
		cmd *exec.Cmd
		out bytes.Buffer
	}
	children := make([]*child, cfg.procs)
	stderr = &lockedWriter{w: stderr} // the children's stderr copiers run concurrently
	for i := range children {
		ch := &child{}
		ch.cmd = exec.CommandContext(ctx, self, workerCommand,
			"-engine", cfg.engine, "-buyers", strconv.Itoa(cfg.buyers), "-products",
			strconv.Itoa(cfg.products),
			"-procs", strconv.Itoa(cfg.procs), "-index", strconv.Itoa(i), "-dir", cfg.storeDir, "-run", run,
			"-timeout", cfg.timeout.String(), "-semaphore", strconv.Itoa(cfg.semaphore),
			"-election="+strconv.FormatBool(cfg.election), "-hold", cfg.hold.String())
		ch.cmd.Stdout = &ch.out
		ch.cmd.Stderr = stderr
		if err := ch.cmd.Start(); err != nil {
			return fmt.Errorf("starting worker %d: %w", i, err)
		}
		children[i] = ch
	}
	var errs []error
	for i, ch := range children {
		if err := ch.cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w", i, err))
			continue
		}
		if err := addTally(t, ch.out.String()); err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// addTally adds a worker's "result ..." line to t.
func addTally(t *tally, out string) error {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "result "); ok {
			counters := map[string]*atomic.Int64{
				"acquisitions": &t.acquisitions, "sold": &t.sold, "fenced": &t.fenced, "failed": &t.failed,
				"retried": &t.retried, "unreleased": &t.unreleased,
			}
			for _, f := range strings.Fields(rest) {
				name, val, _ := strings.Cut(f, "=")
				n, err := strconv.ParseInt(val, 10, 64)
				if c := counters[name]; c != nil && err == nil {
					c.Add(n)
				}
			}
		} else if msg, ok := strings.CutPrefix(line, "error "); ok {
			t.firstErr.CompareAndSwap(nil, msg)
		}
	}
	return nil
}

// workerMain is one child process of a -procs demo.
func workerMain(args []string, stdout, stderr io.Writer) int {
	var cfg demoConfig
	var index int
	var run string
	fs := flag.NewFlagSet(workerCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.flags(fs)
	fs.IntVar(&index, "index", 0, "this worker's index")
	fs.StringVar(&cfg.storeDir, "dir", "", "stock directory")
	fs.StringVar(&run, "run", "", "run id")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.store = "file"
	if err := cfg.check(); err != nil || cfg.storeDir == "" || run == "" || index < 0 ||
		index >= cfg.procs {
		fmt.Fprintf(stderr, "%s: bad arguments: %v\n", workerCommand, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	var t tally
	work := func() error { return runBuyers(ctx, cfg, fileStock{cfg.storeDir}, run, index, cfg.procs, &t) }
	if cfg.primitive() {
		work = func() error {
			return runHolders(ctx, cfg, tracker{filepath.Join(cfg.storeDir, trackerFile)}, run, index, cfg.procs, &t)
		}
	}
	if err := work(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", workerCommand, err)
		return 1
	}
	if first := t.firstErr.Load(); first != nil {
		fmt.Fprintf(stdout, "error %v\n", first)
	}
	fmt.Fprintf(stdout, "result %s\n", t.line())
	return 0
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cerberus-go/cerberus/config"
	"github.com/cerberus-go/cerberus/failover"
)

// statusMain pings every configured engine and says which one is active,
// by failover.DecideActive: the engine key's engine when one is
// configured (none, and why, when the key cannot be read), else the
// file's pin, else the first healthy engine.
func statusMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "cerberus.yaml", "configuration file")
	timeout := fs.Duration("timeout", 2*time.Second, "per-engine ping timeout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 || *timeout <= 0 {
		fmt.Fprintln(stderr, "usage: cerberusctl status [-config FILE] [-timeout D]   (D above 0, no arguments)")
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl status: %v\n", err)
		return 2
	}
	named, err := cfg.Build(context.Background())
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl status: %v\n", err)
		return 1
	}
	res := pingAll(named, *timeout)
	fl, flErr := readFleet(cfg, *timeout)
	active := decideActive(cfg, res, fl, flErr)
	printActive(stdout, cfg, *path, active)
	printStatus(stdout, cfg, res, active)
	printFleet(stdout, cfg, fl, flErr)
	if active.Name == "" {
		return 1
	}
	return 0
}

// readFleet reads the engine key and the fleet's registrations, when the
// configuration has an engine key.
func readFleet(cfg *config.Config, timeout time.Duration) (failover.FleetStatus, error) {
	if !cfg.EngineKey.Set() {
		return failover.FleetStatus{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return config.ReadFleet(ctx, cfg)
}

// decideActive applies failover.DecideActive to what status saw: the
// pings, the file's pin and, with an engine key, the key's value or why
// it could not be read.
func decideActive(cfg *config.Config, res []pingResult, fl failover.FleetStatus,
	flErr error) failover.ActiveEngine {
	in := failover.ActiveFacts{Pin: cfg.Active}
	for i, r := range res {
		in.Engines = append(in.Engines, failover.EngineStatus{Name: cfg.Engines[i].Name,
			Healthy: r.err == nil})
	}
	if cfg.EngineKey.Set() {
		in.Key = cfg.EngineKey.Key
		if flErr != nil {
			in.KeyErr = flErr.Error()
		} else {
			in.KeyEngine = fl.Engine
		}
	}
	return failover.DecideActive(in)
}

// printActive says which engine is active and what decided it, above the
// table, and warns about a pin in the file that an engine key overrides.
func printActive(stdout io.Writer, cfg *config.Config, path string, a failover.ActiveEngine) {
	if a.Name == "" {
		fmt.Fprintf(stdout, "active engine: unknown, no engine marked: %s\n", a.Unknown)
	} else {
		fmt.Fprintf(stdout, "active engine: %s (%s)\n", a.Name, a.Source())
	}
	if w := cfg.PinWarning(path); w != "" {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	fmt.Fprintln(stdout)
}

// pingResult is what one engine's Ping returned, and how long it took.
type pingResult struct {
	err error
	d   time.Duration
}

// pingAll pings every engine at once, each within timeout, and closes it.
func pingAll(named []config.Named, timeout time.Duration) []pingResult {
	res := pingOpen(named, timeout)
	for _, n := range named {
		_ = n.Engine.Close()
	}
	return res
}

// pingOpen pings every engine at once, each within timeout, and leaves
// them open.
func pingOpen(named []config.Named, timeout time.Duration) []pingResult {
	res := make([]pingResult, len(named))
	var wg sync.WaitGroup
	for i, n := range named {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			res[i] = pingResult{n.Engine.Ping(ctx), time.Since(start)}
		}()
	}
	wg.Wait()
	return res
}

// printStatus writes the table of engines: kind, health, ping time, which
// one is active (marked "*", with what decided it: the engine key or the
// file's pin), and any error.
func printStatus(stdout io.Writer, cfg *config.Config, res []pingResult, active failover.ActiveEngine) {
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ENGINE\tKIND\tHEALTH\tPING\tACTIVE\tERROR")
	for i, r := range res {
		e := cfg.Engines[i]
		health, ping, msg := "up", r.d.Round(10*time.Microsecond).String(), ""
		if r.err != nil {
			health, ping, msg = "down", "-", r.err.Error()
		}
		mark := ""
		if e.Name == active.Name {
			switch active.From {
			case failover.FromEngineKey:
				mark = "* (engine key)"
			case failover.FromPin:
				mark = "* (pinned)"
			default:
				mark = "*"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Kind, health, ping, mark, msg)
	}
	_ = w.Flush()
}

// printFleet lists the fleet's live processes under the engine table:
// what each running service is on, not what this process would pick.
func printFleet(stdout io.Writer, cfg *config.Config, fl failover.FleetStatus, err error) {
	fmt.Fprintln(stdout)
	if !cfg.EngineKey.Set() {
		fmt.Fprintln(stdout, "fleet: not shown; the fleet view needs engine_key in the configuration")
		return
	}
	if err != nil {
		fmt.Fprintf(stdout, "fleet: %v\n", err)
		return
	}
	fmt.Fprintf(stdout, "fleet: key %s says %s (epoch %d); %s\n", fl.Key, fl.Engine, fl.Epoch,
		fleetSummary(fl))
	if len(fl.Members) == 0 {
		return
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "HOST\tPID\tACTIVE\tEPOCH\tSINCE\tDOWN")
	for _, m := range fl.Members {
		down := strings.Join(m.Down, ",")
		if down == "" {
			down = "-"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\n", m.Host, m.PID, m.Active, m.Epoch,
			m.Since.Format(time.RFC3339), down)
	}
	_ = w.Flush()
}

// fleetSummary says how the processes split: "3 processes, all on
// backup", or "3 of 5 processes on backup, 2 on primary".
func fleetSummary(fl failover.FleetStatus) string {
	by := fl.ByEngine()
	n := len(fl.Members)
	switch len(by) {
	case 0:
		return "no live process registered"
	case 1:
		for e := range by {
			return fmt.Sprintf("%d processes, all on %s", n, e)
		}
	}
	names := make([]string, 0, len(by))
	for e := range by {
		names = append(names, e)
	}
	sort.Slice(names, func(i, j int) bool {
		return by[names[i]] > by[names[j]] || by[names[i]] == by[names[j]] && names[i] < names[j]
	})
	parts := []string{fmt.Sprintf("%d of %d processes on %s", by[names[0]], n, names[0])}
	for _, e := range names[1:] {
		parts = append(parts, fmt.Sprintf("%d on %s", by[e], e))
	}
	return "processes disagree: " + strings.Join(parts, ", ")
}

// useMain pins an engine: through the engine key when the configuration
// has one (the whole fleet, waiting for it to follow), else in the file.
func useMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("use", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "cerberus.yaml", "configuration file")
	wait := fs.Duration("wait", failover.DefaultFleetWait,
		"with engine_key: how long to wait for every live process to follow (0: do not wait)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr,
			`usage: cerberusctl use [-config FILE] [-wait D] ENGINE   ("" for the default engine)`)
		return 2
	}
	name := fs.Arg(0)
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl use: %v\n", err)
		return 1
	}
	if cfg.EngineKey.Set() {
		return useFleet(cfg, name, *wait, stdout, stderr)
	}
	if err := config.SetEngine(*path, name); err != nil {
		fmt.Fprintf(stderr, "cerberusctl use: %v\n", err)
		return 1
	}
	if name == "" {
		fmt.Fprintf(stdout, "unpinned the engine in %s: every process following it takes the first "+
			"healthy engine\n", *path)
	} else {
		fmt.Fprintf(stdout, "pinned %s in %s: every process following it switches now; locks held on "+
			"the old engine are lost\n", name, *path)
	}
	return 0
}

// useFleet writes the engine key and waits for the fleet, printing each
// change of the count; it exits 1 naming the stragglers if some did not
// follow in time.
func useFleet(cfg *config.Config, name string, wait time.Duration, stdout, stderr io.Writer) int {
	if wait <= 0 {
		wait = -1 // config.Switch: do not wait
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(wait, 0)+10*time.Second)
	defer cancel()
	wrote := false
	rep, err := config.Switch(ctx, cfg, name, wait, func(r failover.SwitchReport) {
		if !wrote {
			wrote = true
			fmt.Fprintf(stdout, "wrote %s (epoch %d) to Consul key %s: locks held on the old engine are "+
				"lost\n", r.Engine, r.Epoch, cfg.EngineKey.Key)
		}
		fmt.Fprintln(stdout, r)
	})
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl use: %v\n", err)
		return 1
	}
	if wait > 0 && !rep.Done() {
		fmt.Fprintf(stderr, "cerberusctl use: after %v, %d of %d processes have not followed: %s\n",
			wait, len(rep.Stragglers), len(rep.Followed)+len(rep.Stragglers), rep)
		return 1
	}
	return 0
}

// configWorkerCommand is the hidden subcommand the multi-process switch
// test runs: it opens a configuration and locks one key in a loop, printing
// "active NAME UNIXNANO" whenever a grant comes from another engine than
// the last, until its standard input closes or -for runs out.
const configWorkerCommand = "config-worker"

func configWorkerMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(configWorkerCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file")
	key := fs.String("key", "", "key to lock")
	limit := fs.Duration("for", time.Minute, "stop after this long")
	if err := fs.Parse(args); err != nil || *path == "" || *key == "" {
		return 2
	}
	s, err := config.Open(context.Background(), *path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", configWorkerCommand, err)
		return 1
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *limit)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
		cancel()
	}()
	out := bufio.NewWriter(stdout)
	last := ""
	for ctx.Err() == nil {
		lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := s.Client.Lock(lctx, *key)
		lcancel()
		if err != nil {
			continue
		}
		if name := s.Failover.Active(); name != last && l.Token()>>48 == s.Failover.Epoch() {
			last = name
			fmt.Fprintf(out, "active %s %d\n", name, time.Now().UnixNano())
			_ = out.Flush()
		}
		time.Sleep(5 * time.Millisecond)
		_ = l.Unlock(context.Background())
	}
	fmt.Fprintln(out, "done")
	_ = out.Flush()
	return 0
}

// splitActive parses a worker's "active NAME UNIXNANO" line.
func splitActive(line string) (name string, at time.Time, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "active" {
		return "", time.Time{}, false
	}
	var ns int64
	if _, err := fmt.Sscan(f[2], &ns); err != nil {
		return "", time.Time{}, false
	}
	return f[1], time.Unix(0, ns), true
}

package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cerberus-go/cerberus/config"
)

// statusMain pings every configured engine and says which one is active.
func statusMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "cerberus.yaml", "configuration file")
	timeout := fs.Duration("timeout", 2*time.Second, "per-engine ping timeout")
	if err := fs.Parse(args); err != nil {
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
	type result struct {
		err error
		d   time.Duration
	}
	res := make([]result, len(named))
	var wg sync.WaitGroup
	for i, n := range named {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			defer cancel()
			start := time.Now()
			res[i] = result{n.Engine.Ping(ctx), time.Since(start)}
			_ = n.Engine.Close()
		}()
	}
	wg.Wait()
	active := ""
	if cfg.Engine != "" && cfg.Find(cfg.Engine) != nil {
		active = cfg.Engine
	} else {
		for i, r := range res {
			if r.err == nil {
				active = named[i].Name
				break
			}
		}
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ENGINE\tKIND\tHEALTH\tPING\tACTIVE\tERROR")
	for i, r := range res {
		e := cfg.Engines[i]
		health, ping, msg := "up", r.d.Round(10*time.Microsecond).String(), ""
		if r.err != nil {
			health, ping, msg = "down", "-", r.err.Error()
		}
		mark := ""
		if e.Name == active {
			mark = "*"
			if cfg.Engine == e.Name {
				mark = "* (pinned)"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Kind, health, ping, mark, msg)
	}
	_ = w.Flush()
	if active == "" {
		fmt.Fprintln(stdout, "no engine is healthy")
		return 1
	}
	return 0
}

// useMain pins an engine in the configuration file.
func useMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("use", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "cerberus.yaml", "configuration file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, `usage: cerberusctl use [-config FILE] ENGINE   ("" to unpin)`)
		return 2
	}
	name := fs.Arg(0)
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl use: %v\n", err)
		return 1
	}
	where := *path
	if cfg.EngineKey.Set() {
		// The fleet follows the Consul key, not the file.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = config.SetEngineKey(ctx, cfg, name)
		cancel()
		where = "Consul key " + cfg.EngineKey.Key
	} else {
		err = config.SetEngine(*path, name)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl use: %v\n", err)
		return 1
	}
	if name == "" {
		fmt.Fprintf(stdout, "unpinned the engine in %s: every process following it takes the first healthy engine\n", where)
	} else {
		fmt.Fprintf(stdout, "pinned %s in %s: every process following it switches now; locks held on the old engine are lost\n", name, where)
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

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cerberus-go/cerberus/config"
	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/failover"
)

// locksUsage is the synopsis of cerberusctl locks.
const locksUsage = "usage: cerberusctl locks [-config FILE] (-prefix P | -all) [-limit N] [-timeout D] [-json]"

// locksMain lists the keys held under a prefix on every engine of a
// configuration, not just the active one: during a switch an operator
// sees what is still held on the engine being left. It exits 0 when every
// engine answered, 1 when one could not list (it still prints the
// others), 2 on bad arguments or a bad configuration, before any I/O.
func locksMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("locks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "cerberus.yaml", "configuration file")
	prefix := fs.String("prefix", "", "list the keys that begin with this (required unless -all)")
	all := fs.Bool("all", false, "list every key (instead of -prefix)")
	limit := fs.Int("limit", engine.DefaultListLimit, fmt.Sprintf("most keys per engine (1 to %d)", engine.MaxListLimit))
	timeout := fs.Duration("timeout", 10*time.Second, "per-engine listing timeout")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	p, err := locksPrefix(*prefix, *all)
	if err == nil && (*limit < 1 || *limit > engine.MaxListLimit) {
		err = fmt.Errorf("-limit %d is outside 1..%d", *limit, engine.MaxListLimit)
	}
	if err == nil && (fs.NArg() != 0 || *timeout <= 0) {
		err = fmt.Errorf("no arguments, and -timeout above 0")
	}
	if err == nil {
		_, _, err = engine.CheckList(p, *limit, engine.MaxKeyLen)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl locks: %v\n%s\n", err, locksUsage)
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl locks: %v\n", err)
		return 2
	}
	bctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	named, err := cfg.Build(bctx)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl locks: %v\n", err)
		return 1
	}
	res := listAll(cfg, named, p, *limit, *timeout)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(locksDoc{Prefix: p, Engines: res})
	} else {
		printLocks(stdout, res, time.Now())
	}
	for _, r := range res {
		if r.Error != "" {
			return 1
		}
	}
	return 0
}

// locksPrefix turns -prefix and -all into List's prefix, refusing both
// or neither: an empty prefix never lists a whole keyspace by accident.
func locksPrefix(prefix string, all bool) (string, error) {
	switch {
	case all && prefix != "":
		return "", fmt.Errorf("-all and -prefix %q together", prefix)
	case all:
		return engine.AllKeys, nil
	case prefix == "":
		return "", fmt.Errorf("no -prefix; give one, or -all to list every key")
	case prefix == engine.AllKeys:
		return "", fmt.Errorf("-prefix %q; use -all to list every key", prefix)
	}
	return prefix, nil
}

// locksDoc is the JSON form of cerberusctl locks.
type locksDoc struct {
	Prefix  string        `json:"prefix"`
	Engines []engineLocks `json:"engines"`
}

// engineLocks is what one engine listed, or why it could not.
type engineLocks struct {
	Name  string               `json:"name"`
	Kind  string               `json:"kind"`
	Error string               `json:"error,omitempty"`
	More  bool                 `json:"more"`
	Keys  []failover.LockedKey `json:"keys"`
}

// listAll lists prefix on every engine at once, each within timeout, and
// closes it.
func listAll(cfg *config.Config, named []config.Named, prefix string, limit int,
	timeout time.Duration) []engineLocks {
	res := make([]engineLocks, len(named))
	var wg sync.WaitGroup
	for i, n := range named {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer n.Engine.Close()
			res[i] = listOne(n, string(cfg.Engines[i].Kind), prefix, limit, timeout)
		}()
	}
	wg.Wait()
	return res
}

// listOne lists prefix on one engine.
func listOne(n config.Named, kind, prefix string, limit int, timeout time.Duration) engineLocks {
	l := failover.ListEngine(context.Background(), failover.NamedEngine{Name: n.Name, Engine: n.Engine},
		prefix, limit, timeout)
	return engineLocks{Name: l.Name, Kind: kind, Error: l.Error, More: l.More, Keys: l.Keys}
}

// printLocks writes one table per engine: a row per holder, the key and
// its waiters on its first holder's row.
func printLocks(w io.Writer, res []engineLocks, now time.Time) {
	for i, r := range res {
		if i > 0 {
			fmt.Fprintln(w)
		}
		switch {
		case r.Error != "":
			fmt.Fprintf(w, "engine %s (%s): error: %s\n", r.Name, r.Kind, r.Error)
			continue
		case r.More:
			fmt.Fprintf(w, "engine %s (%s): %d held keys shown; more are held (raise -limit)\n", r.Name, r.Kind, len(r.Keys))
		default:
			fmt.Fprintf(w, "engine %s (%s): %d held keys\n", r.Name, r.Kind, len(r.Keys))
		}
		if len(r.Keys) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tMODE\tTOKEN\tVALUE\tAGE\tEXPIRES\tWAITERS")
		for _, k := range r.Keys {
			for j, h := range k.Holders {
				key, waiters := "", ""
				if j == 0 {
					key, waiters = k.Key, "?"
					if k.Waiters >= 0 {
						waiters = fmt.Sprint(k.Waiters)
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", key, h.Mode, h.Token, quoteValue(h.Value),
					since(h.Granted, now), until(h.Expires, now), waiters)
			}
		}
		_ = tw.Flush()
	}
}

// quoteValue shows a holder's value, "-" for none.
func quoteValue(v string) string {
	if v == "" {
		return "-"
	}
	if strings.ContainsAny(v, " \t\"") {
		return fmt.Sprintf("%q", v)
	}
	return v
}

// since is the age of a grant, "-" when unknown.
func since(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return now.Sub(*t).Round(time.Second).String()
}

// until is the time left before an expiry, "-" when unknown.
func until(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return "in " + t.Sub(now).Round(100*time.Millisecond).String()
}

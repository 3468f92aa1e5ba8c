package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cerberus-go/cerberus/config"
	"github.com/cerberus-go/cerberus/engine"
)

// releaseUsage is the synopsis of cerberusctl release.
const releaseUsage = "usage: cerberusctl release [-config FILE] [-engine NAME] [-timeout D] -yes KEY"

// releaseArgs are cerberusctl release's checked arguments.
type releaseArgs struct {
	path, engine, key string
	yes               bool
	timeout           time.Duration
}

// releaseMain frees a key whoever holds it, on the engine named by
// -engine or else the active one (as cerberusctl status decides it): the
// next waiter is granted it and the holders are told, with
// ErrReleasedByOperator, by their next renewal. Without -yes it changes
// nothing: it shows the holders it would free and the command that does
// it. It prints the freed holders and who asked (OS user@host), and logs
// the same on stderr. It exits 0 when it freed the key; 1 when it did not
// (no -yes, a free key, an engine that failed or cannot force-release);
// 2 on bad arguments or configuration, before any I/O.
func releaseMain(args []string, stdout, stderr io.Writer) int {
	a, err := parseRelease(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "cerberusctl release: %v\n%s\n", err, releaseUsage)
		}
		return 2
	}
	cfg, err := config.Load(a.path)
	if err == nil && a.engine != "" && !hasEngine(cfg, a.engine) {
		err = fmt.Errorf("-engine %q is not an engine of %s", a.engine, a.path)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl release: %v\n", err)
		return 2
	}
	bctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	named, err := cfg.Build(bctx)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl release: %v\n", err)
		return 1
	}
	defer closeNamed(named)
	n, err := releaseTarget(cfg, named, a)
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl release: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if !a.yes {
		return previewRelease(ctx, n, a, stdout, stderr)
	}
	return doRelease(ctx, n, a, stdout, stderr)
}

// parseRelease reads and checks the flags and the key, without I/O.
func parseRelease(args []string, stderr io.Writer) (releaseArgs, error) {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var a releaseArgs
	fs.StringVar(&a.path, "config", "cerberus.yaml", "configuration file")
	fs.StringVar(&a.engine, "engine", "", "the engine to free the key on (default: the active one)")
	fs.BoolVar(&a.yes, "yes", false, "free the key (without it, only show what would be freed)")
	fs.DurationVar(&a.timeout, "timeout", 10*time.Second, "timeout of the release")
	if err := fs.Parse(args); err != nil {
		return a, flag.ErrHelp
	}
	switch {
	case fs.NArg() != 1:
		return a, fmt.Errorf("name one key to release (got %d arguments)", fs.NArg())
	case a.timeout <= 0:
		return a, fmt.Errorf("-timeout %v is not above 0", a.timeout)
	}
	a.key = fs.Arg(0)
	if err := engine.CheckKey(a.key, engine.MaxKeyLen); err != nil {
		return a, err
	}
	return a, nil
}

// hasEngine reports whether cfg names an engine name.
func hasEngine(cfg *config.Config, name string) bool {
	for _, e := range cfg.Engines {
		if e.Name == name {
			return true
		}
	}
	return false
}

// releaseTarget returns the engine -engine names, or else the active one
// as cerberusctl status decides it (pings, the pin, the engine key).
func releaseTarget(cfg *config.Config, named []config.Named, a releaseArgs) (config.Named, error) {
	name := a.engine
	if name == "" {
		res := pingOpen(named, 2*time.Second)
		fl, flErr := readFleet(cfg, 2*time.Second)
		active := decideActive(cfg, res, fl, flErr)
		if active.Name == "" {
			return config.Named{}, fmt.Errorf("no engine is active (%s); name one with -engine", active.Unknown)
		}
		name = active.Name
	}
	for _, n := range named {
		if n.Name == name {
			return n, nil
		}
	}
	return config.Named{}, fmt.Errorf("engine %q is not configured", name)
}

// previewRelease shows what -yes would free, and changes nothing.
func previewRelease(ctx context.Context, n config.Named, a releaseArgs, stdout, stderr io.Writer) int {
	in := engine.InspectorOf(n.Engine)
	if in == nil {
		fmt.Fprintf(stderr, "cerberusctl release: engine %s cannot list a key's holders\n", n.Name)
		return 1
	}
	hs, err := in.Holders(ctx, a.key)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "cerberusctl release: %v\n", err)
		return 1
	case len(hs) == 0:
		fmt.Fprintf(stderr, "cerberusctl release: %q is not held on engine %s; nothing to release\n", a.key, n.Name)
		return 1
	}
	fmt.Fprintf(stdout, "would release %q on engine %s, freeing:\n", a.key, n.Name)
	printHolders(stdout, hs)
	fmt.Fprintf(stdout, "nothing was changed; to release it, run:\n  cerberusctl release -config %s -engine %s -yes %s\n",
		a.path, n.Name, shellQuote(a.key))
	return 1
}

// doRelease frees the key and prints and logs what it freed.
func doRelease(ctx context.Context, n config.Named, a releaseArgs, stdout, stderr io.Writer) int {
	rel := engine.ReleaserOf(n.Engine)
	if rel == nil {
		fmt.Fprintf(stderr, "cerberusctl release: engine %s cannot force-release a key\n", n.Name)
		return 1
	}
	by := whoAmI()
	hs, err := rel.ForceRelease(ctx, a.key)
	if errors.Is(err, engine.ErrNotHeld) {
		fmt.Fprintf(stderr, "cerberusctl release: %q is not held on engine %s; nothing changed\n", a.key, n.Name)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "cerberusctl release: %v\n", err)
		return 1
	}
	toks := make([]uint64, len(hs))
	for i, h := range hs {
		toks[i] = h.Token
	}
	slog.New(slog.NewTextHandler(stderr, nil)).Warn("cerberus force release", slog.String("key", a.key),
		slog.String("engine", n.Name), slog.Any("tokens", toks), slog.String("by", by))
	fmt.Fprintf(stdout, "released %q on engine %s (asked by %s), freeing:\n", a.key, n.Name, by)
	printHolders(stdout, hs)
	fmt.Fprintln(stdout, "the holders are told (ErrReleasedByOperator) by their next renewal; the next waiter is granted now")
	return 0
}

// printHolders writes a table of holders: mode, token, value.
func printHolders(w io.Writer, hs []engine.Holder) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODE\tTOKEN\tVALUE")
	for _, h := range hs {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", h.Mode, h.Token, quoteValue(h.Value))
	}
	_ = tw.Flush()
}

// whoAmI names the operator: the OS user at this host.
func whoAmI() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return name + "@" + host
}

// closeNamed closes every engine of named.
func closeNamed(named []config.Named) {
	for _, n := range named {
		_ = n.Engine.Close()
	}
}

// shellQuote quotes s for a POSIX shell when it holds anything but
// letters, digits and -_.:/@+=,.
func shellQuote(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@+=,", r)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

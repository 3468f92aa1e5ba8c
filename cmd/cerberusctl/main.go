// Command cerberusctl is the operators' tool for cerberus: it shows the
// health of a configuration's engines and which one is active (with
// engine_key, the one the key names), switches every process (through the
// engine key when the configuration has one, else by pinning the engine
// in the file they watch), lists the keys held on every engine, frees a
// key whoever holds it (force release), and runs the seckill demo.
//
// Usage:
//
//	cerberusctl status [-config cerberus.yaml] [-timeout 2s]
//	cerberusctl use [-config cerberus.yaml] [-wait 10s] ENGINE
//	cerberusctl locks [-config cerberus.yaml] (-prefix P | -all) [-limit 1000]
//	                  [-timeout 10s] [-json]
//	cerberusctl release [-config cerberus.yaml] [-engine NAME] [-timeout 10s] -yes KEY
//	cerberusctl demo [-engine memory] [-buyers 1000] [-products 2] [-stock 10000]
//	                 [-procs 1] [-failover]
//
// It uses the standard flag package rather than cobra: single-dash long
// flags (-engine) are the documented interface, and pflag reads -engine as
// -e -n -g....
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "demo":
		return demoMain(args[1:], stdout, stderr)
	case "status":
		return statusMain(args[1:], stdout, stderr)
	case "use":
		return useMain(args[1:], stdout, stderr)
	case "locks":
		return locksMain(args[1:], stdout, stderr)
	case "release":
		return releaseMain(args[1:], stdout, stderr)
	case workerCommand:
		return workerMain(args[1:], stdout, stderr)
	case configWorkerCommand:
		return configWorkerMain(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "cerberusctl: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, `usage: cerberusctl <command> [flags]

commands:
  demo    run the seckill demo: concurrent buyers decrement stock under a lock
          (cerberusctl demo -h lists its flags; -failover shows a switch)
  status  ping every engine of a configuration and show which one is active:
          with engine_key the key's engine, else the pinned or first healthy
          one (cerberusctl status -config cerberus.yaml)
  use     switch every process: through engine_key when configured, else by
          pinning the engine in the file they watch
          (cerberusctl use -config cerberus.yaml NAME)
  locks   list the keys held under a prefix on every engine of a configuration,
          active or not: holders with mode, token, value, age or expiry, and
          waiters (cerberusctl locks -config cerberus.yaml -prefix order: [-json])
  release free a key whoever holds it, on the active engine or -engine NAME: the
          next waiter is granted it, the holders are told at their next renewal;
          without -yes only shows what it would free
          (cerberusctl release -config cerberus.yaml -yes order:42)`)
}

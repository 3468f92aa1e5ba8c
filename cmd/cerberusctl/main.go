// Command cerberusctl is the operators' tool for cerberus. Today it runs the
// seckill demo; status and engine switching arrive with the failover
// manager.
//
// Usage:
//
//	cerberusctl demo [-engine memory] [-buyers 1000] [-products 2] [-stock 10000] [-procs 1]
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
	case workerCommand:
		return workerMain(args[1:], stdout, stderr)
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
          (cerberusctl demo -h lists its flags)`)
}

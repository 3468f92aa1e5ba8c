package integration

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the tests, or, when started by the checker with a worker
// spec in the environment, one checker worker process (or, with a page
// worker spec, one status page worker).
func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		if err := runWorker(spec); err != nil {
			fmt.Fprintln(os.Stderr, "checker worker:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(pageWorkerEnv); spec != "" {
		if err := runPageWorker(spec); err != nil {
			fmt.Fprintln(os.Stderr, "page worker:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

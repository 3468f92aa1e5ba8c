package integration

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the tests, or, when started by the checker with a worker
// spec in the environment, one checker worker process.
func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		if err := runWorker(spec); err != nil {
			fmt.Fprintln(os.Stderr, "checker worker:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

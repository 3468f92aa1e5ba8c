package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestReserveAcrossProcesses: a port one test process reserved is refused
// to another until the first exits. The test runs itself as the other
// process, which holds the port given in CERBERUS_TEST_HOLD_PORT.
func TestReserveAcrossProcesses(t *testing.T) {
	if v := os.Getenv("CERBERUS_TEST_HOLD_PORT"); v != "" {
		port, _ := strconv.Atoi(v)
		if !reserve(port) {
			fmt.Println("refused")
			os.Exit(1)
		}
		fmt.Println("held")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
		os.Exit(0)
	}
	port := 29999 - os.Getpid()%1000 // no other process of this machine's tests holds it
	cmd := exec.Command(os.Args[0], "-test.run=^TestReserveAcrossProcesses$")
	cmd.Env = append(os.Environ(), "CERBERUS_TEST_HOLD_PORT="+strconv.Itoa(port))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("the other process did not hold port %d: %q %v", port, line, err)
	}
	if reserve(port) {
		t.Fatalf("port %d reserved here while another process holds it", port)
	}
	_ = stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the other process did not exit")
	}
	if !reserve(port) {
		t.Fatalf("port %d still refused after the other process exited", port)
	}
}

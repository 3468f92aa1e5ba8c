package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
)

// engineNames lists the engines the demo can run on. Each engine's issue
// adds its own entry; the failover manager's config package will take this
// over.
var engineNames = []string{"memory"}

// crossProcess reports whether an engine locks across OS processes.
func crossProcess(name string) bool { return name != "memory" }

// newEngine builds the named engine, checking the name before any I/O.
func newEngine(name string) (engine.Engine, error) {
	switch name {
	case "memory":
		return memory.New(), nil
	}
	if !slices.Contains(engineNames, name) {
		return nil, fmt.Errorf("unknown engine %q (available: %s)", name, strings.Join(engineNames, ", "))
	}
	return nil, fmt.Errorf("engine %q is listed but not wired", name)
}

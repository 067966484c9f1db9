package diag

import (
	"os"

	"github.com/mcpvisor/mcpvisor/internal/proc"
)

func init() {
	// doctor opens the process runtime, which probes by re-executing this
	// binary as a pid-namespace init: run it and exit before any test.
	proc.RunShimIfRequested()
	// Under -race the race runtime sleeps a second in every exit of a
	// race-built process; this binary's children are (the shim), and
	// the second is not what their exit costs in production.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
}

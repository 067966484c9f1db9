package diag

import "github.com/mcpvisor/mcpvisor/internal/proc"

func init() {
	// doctor opens the process runtime, which probes by re-executing this
	// binary as a pid-namespace init: run it and exit before any test.
	proc.RunShimIfRequested()
}

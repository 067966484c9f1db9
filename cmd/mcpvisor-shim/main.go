// Command mcpvisor-shim is the init mcpvisor puts at the top of each
// server's pid namespace on Linux. Installed next to the mcpvisor binary, it
// makes every server start (and every wake of a dormant server) about 3 ms
// faster than mcpvisor re-executing itself for the same job; mcpvisor works
// without it. It is started by mcpvisor, never by hand: see package
// internal/proc/shim for what it does.
package main

import (
	"fmt"
	"os"

	"github.com/mcpvisor/mcpvisor/internal/proc/shim"
)

func main() {
	shim.RunIfRequested()
	fmt.Fprintf(os.Stderr, "%s: the pid-namespace init of mcpvisor; mcpvisor starts it, not you\n", shim.Name)
	os.Exit(2)
}

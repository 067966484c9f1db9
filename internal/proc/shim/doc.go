// Package shim is the init that mcpvisor puts at the top of a server's pid
// namespace on Linux.
//
// A pid namespace's init ignores every signal it has no handler for, and
// the kernel kills the whole namespace when the init dies. So the server
// must not be that init: the shim is. It starts the server, forwards stop
// signals to every process of the namespace, reaps everything, and when the
// server exits gives the rest a short quiesce window, kills them, reports
// the server's status on fd 3 and exits. It closes no pipe of the server's:
// EOF on the server's stdout follows the server alone.
//
// The shim runs either as the small mcpvisor-shim binary installed next to
// mcpvisor (cmd/mcpvisor-shim), which starts in about a third of the time,
// or as mcpvisor itself re-executed. Both reach RunIfRequested first thing.
//
// The protocol between mcpvisor and the shim:
//
//   - the environment variable Env is Probe (print Probe and exit 0: the
//     probe that the namespace and the binary work) or Run;
//   - the rest of the environment is the server's, which the shim passes
//     on without Env: mcpvisor's own MCPVISOR_ variables, its token among
//     them, are already gone (see proc.Environ), unless the server's
//     environment was configured explicitly;
//   - the arguments are QUIESCE -- PATH ARGV0 ARGS...;
//   - fd 3 is the status pipe: "exit N" or "signal N" when the server ended;
//   - fd 4 is the stop pipe: EOF on it (mcpvisor began a stop, or died)
//     means no quiesce window for what the server leaves behind.
//
// The values of Env carry a protocol version, so a shim binary left from
// another version fails the probe and mcpvisor falls back to itself.
package shim

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Env selects the shim's role; see the package documentation.
const (
	Env   = "MCPVISOR_PROC_SHIM"
	Probe = "probe-1"
	Run   = "run-1"
)

// Name is the file name of the shim binary, looked for next to mcpvisor.
const Name = "mcpvisor-shim"

// RunIfRequested returns at once in an ordinary start. In a process started
// as a probe or as the init of a pid namespace it does that and exits. It
// must come first in main (and in TestMain of a test binary that starts
// servers in pid namespaces).
func RunIfRequested() {
	switch os.Getenv(Env) {
	case "":
		return
	case Probe:
		fmt.Println(Probe) // what the prober checks: this binary speaks this protocol
		os.Exit(0)
	case Run:
		os.Exit(Main(os.Args[1:]))
	default:
		fmt.Fprintf(os.Stderr, "%s: unknown %s=%q (another version of mcpvisor?)\n", Name, Env, os.Getenv(Env))
		os.Exit(125)
	}
}

// ParseStatus reads the status line the shim writes on fd 3: the server's
// exit code, or -1 and the signal that ended it.
func ParseStatus(s string) (code int, sig syscall.Signal, ok bool) {
	var kind string
	var n int
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "%s %d", &kind, &n); err != nil {
		return 0, 0, false
	}
	switch kind {
	case "exit":
		return n, 0, true
	case "signal":
		return -1, syscall.Signal(n), true
	}
	return 0, 0, false
}

package gateway

import (
	"os"

	"github.com/mcpvisor/mcpvisor/internal/proc"
)

func init() {
	os.Setenv("GODEBUG", "execwait=2")
	os.Setenv("GORACE", "atexit_sleep_ms=0") // this binary is also the pid-namespace shim
	// Re-executed as a server's pid-namespace init: run it and exit
	// before any test starts (TestMain, with goleak, is in
	// http_main_test.go).
	proc.RunShimIfRequested()
}

package backend

import (
	"os"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"go.uber.org/goleak"
)

func init() {
	os.Setenv("GORACE", "atexit_sleep_ms=0") // this binary is also the pid-namespace shim
	// Re-executed as a server's pid-namespace init: run it and exit
	// before any test starts.
	proc.RunShimIfRequested()
	// Or run as a fake modern server (modern_listen_test.go).
	runFakeModern()
}

// TestMain checks that no test of the package leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

package fleet

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/mcpvisor/mcpvisor/internal/proc"
)

func init() {
	os.Setenv("GODEBUG", "execwait=2")
	os.Setenv("GORACE", "atexit_sleep_ms=0") // this binary is also the pid-namespace shim
}

func TestMain(m *testing.M) {
	proc.RunShimIfRequested()
	goleak.VerifyTestMain(m)
}

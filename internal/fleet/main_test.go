package fleet

import (
	"fmt"
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
	// A move of an instance the table refuses is a bug: every test fails
	// on it, not only the table's own.
	transitionRefused = func(in *instance, from, to phase) {
		panic(fmt.Sprintf("server %s: instance moved from %s to %s, which the table refuses", in.srv.Name(), from, to))
	}
	goleak.VerifyTestMain(goldenM{m})
}

// goldenM runs the tests, then checks the events they emitted against
// testdata/events (golden_events_test.go).
type goldenM struct{ m *testing.M }

func (g goldenM) Run() int {
	code := g.m.Run()
	if err := checkGoldenEvents(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

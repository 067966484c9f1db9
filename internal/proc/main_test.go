package proc

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func init() {
	// Panic, with the creating stack, on any exec.Cmd that was started and
	// never waited.
	os.Setenv("GODEBUG", "execwait=2")
	// This binary is re-executed as the pid-namespace shim. Under -race the
	// race runtime would sleep a second in every exit, which is not what a
	// stop costs in production.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
}

func TestMain(m *testing.M) {
	RunShimIfRequested()
	if os.Getenv(harnessEnv) != "" {
		os.Exit(runHarness())
	}
	if os.Getenv(closeRaceEnv) != "" {
		os.Exit(runCloseRace())
	}
	goleak.VerifyTestMain(reapedAfter{m})
}

// reapedAfter runs the tests, then waits, bounded, until every tree they
// spawned is reaped: a Stop bounded by its context returns while the kill
// goes on (by design), and a test may end then. A tree still not reaped
// after the bound is a leak, which goleak then reports (the spawner
// goroutine that outlives it).
type reapedAfter struct{ m *testing.M }

func (r reapedAfter) Run() int {
	code := r.m.Run()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if liveSpawns() == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return code
}

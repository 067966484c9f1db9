package proc

import (
	"os"
	"testing"

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
	goleak.VerifyTestMain(m)
}

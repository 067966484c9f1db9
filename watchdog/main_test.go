package watchdog

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// roleEnv makes the test binary run as a helper process (see runRole)
// instead of running tests.
const roleEnv = "WATCHDOG_TEST_ROLE"

func init() {
	// Panic, with the creating stack, on any exec.Cmd that was started and
	// never waited.
	os.Setenv("GODEBUG", "execwait=2")
	// Helper processes are this binary re-executed; under -race the race
	// runtime would sleep a second in every exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
}

// TestMain runs a helper role if asked to, and otherwise the tests, failing
// the binary if any goroutine is still running after them.
func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	goleak.VerifyTestMain(m)
}

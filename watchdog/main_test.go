package watchdog

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the test binary if any goroutine is still running after
// the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

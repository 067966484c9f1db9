package lifecycle

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the test binary if any goroutine is still running after
// the tests: a Supervisor must leave nothing behind once stopped or failed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

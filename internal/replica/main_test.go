package replica

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test's servers and connections are closed by its end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

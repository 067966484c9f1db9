package audit

import (
	"testing"

	"go.uber.org/goleak"
)

// No writer, follower or handler goroutine outlives its Log's Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

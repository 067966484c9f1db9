package dashboard

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/mcpvisor/mcpvisor/internal/testserver/hydra"
)

// TestMain stops the shared Hydra (the login tests') before checking
// that no goroutine leaked.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := hydra.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping hydra:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

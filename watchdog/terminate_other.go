//go:build !unix

package watchdog

import "os"

// terminate is the default Config.OnTerminate where a process cannot signal
// itself: exit at once with status 0.
func terminate(Reason) {
	os.Exit(0)
}

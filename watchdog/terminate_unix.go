//go:build unix

package watchdog

import (
	"os"
	"syscall"
)

// terminate is the default Config.OnTerminate: SIGTERM to this process, so
// that the program's own shutdown (signal.NotifyContext and the like) runs,
// and a program without a handler dies by the signal's default action.
func terminate(Reason) {
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
}

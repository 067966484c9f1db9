//go:build unix

package daemon

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyReload delivers SIGHUP, the reload signal, on ch; stop undoes it.
func notifyReload(ch chan<- os.Signal) (stop func()) {
	signal.Notify(ch, syscall.SIGHUP)
	return func() { signal.Stop(ch) }
}

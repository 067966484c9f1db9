//go:build !unix

package daemon

import "os"

// notifyReload does nothing where there is no SIGHUP: reload through the
// API, the CLI or the watched file.
func notifyReload(chan<- os.Signal) (stop func()) { return func() {} }

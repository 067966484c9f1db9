//go:build unix

package main

import (
	"os"
	"syscall"
)

// interruptibleStdin returns stdin as a file whose blocked Read ends when it
// is closed: a pipe in non-blocking mode goes through the runtime's poller.
// A terminal is left as it is (its mode is shared with the shell). restore
// puts the blocking mode back.
func interruptibleStdin() (*os.File, func()) {
	if isTerminal(os.Stdin) {
		return os.Stdin, func() {}
	}
	if err := syscall.SetNonblock(0, true); err != nil {
		return os.Stdin, func() {}
	}
	return os.NewFile(0, "/dev/stdin"), func() { _ = syscall.SetNonblock(0, false) }
}

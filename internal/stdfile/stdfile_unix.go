//go:build unix

package stdfile

import (
	"os"
	"syscall"
)

// Stdin returns stdin as a file whose blocked Read ends when it
// is closed: a pipe in non-blocking mode goes through the runtime's poller.
// A terminal is left as it is (its mode is shared with the shell). restore
// puts the blocking mode back.
func Stdin() (*os.File, func()) { return interruptible(os.Stdin, 0, "/dev/stdin") }

// Stdout is Stdin for stdout: a blocked Write
// ends when the file is closed.
func Stdout() (*os.File, func()) { return interruptible(os.Stdout, 1, "/dev/stdout") }

func interruptible(f *os.File, fd int, name string) (*os.File, func()) {
	if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		return f, func() {}
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		return f, func() {}
	}
	return os.NewFile(uintptr(fd), name), func() { _ = syscall.SetNonblock(fd, false) }
}

//go:build unix

package testserver

import (
	"errors"
	"os"
	"syscall"
)

// flockExclusive tries once for an exclusive flock on f.
func flockExclusive(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// flockHeld reports whether err says that another open file holds the
// lock.
func flockHeld(err error) bool { return errors.Is(err, syscall.EWOULDBLOCK) }

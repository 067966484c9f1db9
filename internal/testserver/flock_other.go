//go:build !unix

package testserver

import (
	"fmt"
	"os"
	"runtime"
)

// flockExclusive is not supported off Unix.
func flockExclusive(*os.File) error {
	return fmt.Errorf("-flock is not supported on %s", runtime.GOOS)
}

func flockHeld(error) bool { return false }

//go:build !unix

package testserver

import (
	"fmt"
	"os"
	"runtime"
)

// spawnLinger is not supported off Unix.
func spawnLinger(setsid bool, stdout, stderr *os.File) (int, error) {
	return 0, fmt.Errorf("lingering grandchildren are not supported on %s", runtime.GOOS)
}

func signalReady(string) {}

// forkBomb is not supported off Unix.
func forkBomb(int) (int, error) {
	return 0, fmt.Errorf("-fork-bomb is not supported on %s", runtime.GOOS)
}

//go:build unix

package testserver

import (
	"os"
	"os/exec"
	"syscall"
)

// forkBomb starts sleeping children (sleep 3600, stdio on /dev/null, in
// this process's group) until a start fails or max of them run, and
// returns how many it started and the error that stopped it (nil when it
// reached max). The children are never waited for: they live until the
// tree is killed.
func forkBomb(max int) (int, error) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return 0, err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	fd := null.Fd()
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{fd, fd, fd}}
	for n := range max {
		if _, err := syscall.ForkExec(sleep, []string{"sleep", "3600"}, attr); err != nil {
			return n, err
		}
	}
	return max, nil
}

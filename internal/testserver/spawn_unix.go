//go:build unix

package testserver

import (
	"os"
	"os/exec"
	"syscall"
)

// spawnLinger starts this executable again in -linger mode, with the same
// environment (so the same MarkerEnv). With setsid the grandchild gets a new
// session; otherwise it stays in our process group. A nil stdout or stderr
// means /dev/null; stdin is always /dev/null. The child is reaped in the
// background so that it never becomes our zombie and never delays our exit.
func spawnLinger(setsid bool, stdout, stderr *os.File) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(exe, "-linger")
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() { _ = cmd.Wait() }()
	return cmd.Process.Pid, nil
}

//go:build unix

package launch

import (
	"os/exec"
	"syscall"
)

// ownGroup makes cmd the leader of a process group of its own, killed
// whole when ctx ends. (No parent-death signal: a probe is short and
// bounded, and one from a Go thread that exits would kill it early.)
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// killGroup kills what is left of the process group led by pid.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

//go:build !linux

package hydra

import "syscall"

// sysProcAttr puts Hydra in a process group of its own: Close stops the
// group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

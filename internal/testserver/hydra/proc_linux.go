package hydra

import "syscall"

// sysProcAttr puts Hydra in a process group of its own (Close stops the
// group) and, should the test binary die without its cleanups, has the
// kernel kill it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

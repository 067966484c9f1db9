package haproxy

import "syscall"

// sysProcAttr has the kernel kill haproxy should the test binary die
// without its cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

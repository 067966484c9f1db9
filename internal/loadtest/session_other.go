//go:build unix && !linux

package loadtest

import "syscall"

// OwnSession is the SysProcAttr of a process under test: it starts in a
// session of its own (setsid), as on Linux, where it also gets SIGTERM
// when its parent dies.
func OwnSession() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true}
}

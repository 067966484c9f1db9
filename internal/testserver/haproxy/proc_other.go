//go:build !linux

package haproxy

import "syscall"

// sysProcAttr is the default: no parent-death signal off Linux.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}

//go:build unix

package rpc

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// nonblocking tells whether rc's descriptor is in non-blocking mode.
func nonblocking(rc syscall.RawConn) bool {
	var flags int
	var ferr error = syscall.EINVAL
	if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
		return false
	}
	return flags&unix.O_NONBLOCK != 0
}

func writeFD(fd uintptr, b []byte) (int, error) { return syscall.Write(int(fd), b) }

//go:build linux || darwin

package connect

import "net"

// peerUID is the uid of the process that listens on c's other end, from
// the kernel (peerCredUID), not from a file another user could swap.
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var uid int
	var gerr error
	if err := raw.Control(func(fd uintptr) { uid, gerr = peerCredUID(int(fd)) }); err != nil {
		return 0, err
	}
	return uid, gerr
}

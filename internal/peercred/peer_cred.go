//go:build linux || darwin

package peercred

import "net"

// UID is the uid of the process at c's other end — the one that
// listened, or the one that connected — from the kernel (peerCredUID),
// not from a file another user could swap.
func UID(c *net.UnixConn) (int, error) {
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

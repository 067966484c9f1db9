//go:build unix && !linux && !darwin

package peercred

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// UID is the owner of the socket file c is connected to (no peer
// credentials here).
func UID(c *net.UnixConn) (int, error) {
	fi, err := os.Stat(c.RemoteAddr().String())
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("no owner for the socket file")
	}
	return int(st.Uid), nil
}

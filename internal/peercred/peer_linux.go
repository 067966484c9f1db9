package peercred

import "golang.org/x/sys/unix"

// peerCredUID is SO_PEERCRED's uid: the peer's as it listened.
func peerCredUID(fd int) (int, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return 0, err
	}
	return int(cred.Uid), nil
}

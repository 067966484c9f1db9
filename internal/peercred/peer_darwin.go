package peercred

import "golang.org/x/sys/unix"

// peerCredUID is LOCAL_PEERCRED's uid: the peer's as it listened.
func peerCredUID(fd int) (int, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return 0, err
	}
	return int(cred.Uid), nil
}

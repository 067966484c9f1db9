package secret

import "golang.org/x/sys/unix"

const (
	echoFlags = unix.ECHO | unix.ECHONL
	icanon    = unix.ICANON
)

func getTermios(fd int) (*unix.Termios, error) { return unix.IoctlGetTermios(fd, unix.TCGETS) }
func setTermios(fd int, t *unix.Termios) error { return unix.IoctlSetTermios(fd, unix.TCSETS, t) }

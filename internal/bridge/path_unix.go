//go:build unix

package bridge

import (
	"fmt"
	"os"
	"syscall"
)

// maxSocketPath is the longest socket path bind and connect take here:
// sun_path less its terminating NUL.
var maxSocketPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// privateDir makes dir (mode 0700) if it is missing and checks that it is
// a directory of this user's that no one else may enter: a shared temp
// directory must not let another user put a socket where connect dials.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is not a directory of this user's with mode 0700: not putting the mcpvisor socket there (pass --socket)", dir)
	}
	return nil
}

//go:build !unix

package bridge

import "os"

// maxSocketPath: Windows' sockaddr_un holds 108 bytes, as Linux's.
var maxSocketPath = 107

func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	return nil
}

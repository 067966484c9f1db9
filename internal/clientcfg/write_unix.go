//go:build unix

package clientcfg

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// keepOwner gives f the owner and group of the file it replaces, when
// this process may (root may; a user may only keep its own groups): a
// failure leaves f the process's.
func keepOwner(f *os.File, was fs.FileInfo) {
	st, ok := was.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	if now, err := f.Stat(); err == nil {
		if cur, ok := now.Sys().(*syscall.Stat_t); ok && cur.Uid == st.Uid && cur.Gid == st.Gid {
			return
		}
	}
	_ = f.Chown(int(st.Uid), int(st.Gid))
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	return nil
}

package clientcfg

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrChanged is what ReplaceFile returns when the file is not as it was
// read: another program wrote it meanwhile, and nothing was written.
var ErrChanged = errors.New("the file changed since it was read (another program wrote it); nothing written: run again")

// Resolve returns the file path names, its symbolic links followed (a
// dangling one too): the file an edit replaces, so that a link (a
// config kept in a dotfiles repository) stays a link.
func Resolve(path string) (string, error) {
	for range 40 {
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return path, nil
		}
		target, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			// Relative to the link's directory as it really is: that
			// directory may itself be reached through a link, and ".."
			// in target goes up from where it is, not from its name.
			dir, err := filepath.EvalSymlinks(filepath.Dir(path))
			if err != nil {
				return "", err
			}
			target = filepath.Join(dir, target)
		}
		path = target
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", path)
}

// WriteFileAtomic replaces the file at path with data: it writes a
// temporary file in the same directory, syncs it and renames it over
// path, so a reader sees the old content or the new, never a part. A
// symbolic link is followed: its target is replaced, the link stays. The
// file keeps its mode and, when this process may give it, its owner (a
// root run through sudo leaves the user's file the user's); a new file
// gets mode. The directory is synced after the rename (best effort: once
// the rename is done the file is written, and no error says otherwise).
func WriteFileAtomic(path string, data []byte, mode fs.FileMode) error {
	return writeAtomic(path, data, mode, nil)
}

// ReplaceFile is WriteFileAtomic for a file read earlier as was (existed
// false: it did not exist): just before the rename the file is read
// again, and when it is not as it was ErrChanged is returned and nothing
// is written, so that what another program wrote meanwhile is not lost.
// (A write between that check and the rename, microseconds, is still
// possible: the clients do not lock their files.)
func ReplaceFile(path string, data []byte, mode fs.FileMode, was []byte, existed bool) error {
	return writeAtomic(path, data, mode, func(target string) error {
		cur, err := os.ReadFile(target)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if existed {
				return fmt.Errorf("%s: %w", path, ErrChanged)
			}
			return nil
		case err != nil:
			return err
		case !existed || !bytes.Equal(cur, was):
			return fmt.Errorf("%s: %w", path, ErrChanged)
		}
		return nil
	})
}

func writeAtomic(path string, data []byte, mode fs.FileMode, check func(target string) error) error {
	target, err := Resolve(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(target)
	if err == nil {
		mode = fi.Mode().Perm()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	} else {
		fi = nil
	}
	dir := filepath.Dir(target)
	f, err := os.CreateTemp(dir, "."+filepath.Base(target)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a failure; gone after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if fi != nil {
		keepOwner(f, fi)
	}
	if err := f.Chmod(mode); err != nil { // after chown, which may clear bits
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if check != nil {
		if err := check(target); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, target); err != nil {
		return err
	}
	// Written: a directory that cannot be synced now is no reason to
	// report otherwise (a caller would take the file as not written).
	_ = syncDir(dir)
	return nil
}

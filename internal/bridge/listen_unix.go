//go:build unix

package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Listener is a daemon's socket, listened on by Listen. It holds the
// socket's lock (path + ".lock") for as long as it is open: the lock, not
// the file, says that a live daemon owns the path.
type Listener struct {
	*net.UnixListener
	path string
	fi   os.FileInfo // the socket file as made, to remove only ours
	lock *os.File

	once sync.Once
	err  error
}

// Listen listens on the unix socket path, mode 0600, for one daemon. It
// first takes path + ".lock" (flock, without waiting): if another process
// holds it, or a socket at path answers (a daemon that lost its lock
// file), it returns an error wrapping ErrInUse and touches nothing — a
// live daemon's socket is never stolen. Otherwise a file left at path is a
// dead daemon's: it is replaced if it is a socket, and refused (an error,
// nothing removed) if it is anything else. The socket is made in a fresh
// temporary directory of mode 0700 next to path, given mode 0600 and then
// renamed to path, so it is never reachable with looser permissions.
// path's directory is made 0700 if missing.
func Listen(path string) (*Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	lock, err := TryLock(path + ".lock")
	if err != nil {
		return nil, err
	}
	l, err := listen(path)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	l.lock = lock
	return l, nil
}

func listen(path string) (*Listener, error) {
	if err := errInUse(path); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode()&os.ModeSocket == 0:
		return nil, fmt.Errorf("%s exists and is not a socket: not replacing it (remove it, or pass another --socket)", path)
	case err == nil:
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("replacing the stale socket %s: %w", path, err)
		}
	case !os.IsNotExist(err):
		return nil, err
	}
	// Made in a fresh directory of mode 0700 next to path (rename does
	// not cross file systems), given mode 0600 there and then renamed to
	// path: bind makes the socket with the umask's permissions, and no
	// one else may reach it through the private directory before the
	// chmod. If that name does not fit a socket path, path itself (the
	// state directory is the user's, 0700, as Listen makes it).
	tmp, dir := path, ""
	if d, err := os.MkdirTemp(filepath.Dir(path), ".s"); err == nil {
		if t := filepath.Join(d, "s"); fits(t) {
			tmp, dir = t, d
		} else {
			_ = os.Remove(d)
		}
	}
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if afterBind != nil {
		afterBind(tmp)
	}
	err = os.Chmod(tmp, 0o600)
	if err == nil && tmp != path {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		fi, err = os.Lstat(path)
	}
	if err != nil {
		_ = ln.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	return &Listener{UnixListener: ln, path: path, fi: fi}, nil
}

// afterBind, if set (by tests), sees the socket just made, under its
// temporary name, with the umask's permissions.
var afterBind func(tmp string)

// errInUse is an error wrapping ErrInUse if a socket at path answers.
func errInUse(path string) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return nil
	}
	_ = c.Close()
	return fmt.Errorf("%w: a daemon answers on %s", ErrInUse, path)
}

// Path is the socket's path.
func (l *Listener) Path() string { return l.path }

// Close stops listening, removes the socket file if it is still the one
// Listen made, and releases the lock. Safe to call more than once; every
// call returns the first one's error.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.fi) {
			_ = os.Remove(l.path)
		}
		if l.lock != nil {
			_ = l.lock.Close()
		}
	})
	return l.err
}

// TryLock takes an exclusive flock on path (made 0600 if missing) without
// waiting. If another process holds it, it returns an error wrapping
// ErrInUse. Closing the returned file releases the lock, as does the
// process's exit.
func TryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked", ErrInUse, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return f, nil
}

// Lock takes an exclusive flock on path (made 0600 if missing), waiting
// for it as long as ctx lasts (the lock is tried every 10 ms: flock has
// no wait that ends with a context). Closing the returned file releases
// the lock.
func Lock(ctx context.Context, path string) (*os.File, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		f, err := TryLock(path)
		if !errors.Is(err, ErrInUse) {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s: %w", path, context.Cause(ctx))
		case <-t.C:
		}
	}
}

//go:build unix

package bridge

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A live daemon's socket is never taken; a dead one's is replaced; a file
// that is not a socket is left alone.
func TestListen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", SocketName)
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v %v", fi, err)
	}
	if _, err := Listen(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("a second Listen on a live socket: %v, want ErrInUse", err)
	}
	// Still the first one's: it answers.
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("the first listener lost its socket: %v", err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the socket: %v", err)
	}
	l.Close() // again: no effect

	// A dead daemon's socket: the file, nothing answering, no lock held.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	l, err = Listen(path)
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	l.Close()

	// A socket that answers though its lock is free (the lock file was
	// removed) is in use too.
	ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("Listen on a socket that answers: %v, want ErrInUse", err)
	}
	ln.Close()

	if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Fatal("Listen replaced a regular file")
	}
}

// Close removes only the socket Listen made: one put in its place is
// left.
func TestListenerCloseKeepsAnotherSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), SocketName)
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	other, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	l.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("Close removed a socket it did not make: %v", err)
	}
}

func TestSocketPath(t *testing.T) {
	short := t.TempDir()
	if p, fb, err := SocketPath(short); err != nil || fb || p != filepath.Join(short, SocketName) {
		t.Fatalf("short: %s %v %v", p, fb, err)
	}
	long := filepath.Join(short, strings.Repeat("d", 120))
	runtime := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", runtime)
	p, fb, err := SocketPath(long)
	if err != nil || !fb || filepath.Dir(p) != runtime || !fits(p) {
		t.Fatalf("long, with XDG_RUNTIME_DIR: %s %v %v", p, fb, err)
	}
	if q, _, _ := SocketPath(long + "x"); q == p {
		t.Fatal("two state directories share a fallback socket")
	}
	if q, _, _ := SocketPath(long); q != p {
		t.Fatalf("the fallback is not stable: %s then %s", p, q)
	}

	t.Setenv("XDG_RUNTIME_DIR", "")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	p, fb, err = SocketPath(long)
	dir := filepath.Join(tmp, "mcpvisor-"+itoa(os.Getuid()))
	if err != nil || !fb || filepath.Dir(p) != dir {
		t.Fatalf("long, in the temp dir: %s %v %v", p, fb, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the private dir: %v %v", fi, err)
	}
	os.Chmod(dir, 0o755)
	if _, _, err := SocketPath(long); err == nil || !strings.Contains(err.Error(), "mode 0700") {
		t.Fatalf("a private dir others may enter: %v", err)
	}
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "daemon.lock")
	first, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TryLock(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("TryLock on a held lock: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its context: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		f, err := Lock(context.Background(), path)
		if err == nil {
			f.Close()
		}
		got <- err
	}()
	first.Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not get a released lock")
	}
}

// The socket is never reachable with looser permissions than 0600, even
// under a umask of 0: as bind makes it (with the umask's permissions),
// what is in its directory is a socket of 0600 or a directory of 0700,
// and afterwards the temporary directory is gone.
func TestListenNeverLoose(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, SocketName)
	checked := false
	afterBind = func(tmp string) {
		checked = true
		if filepath.Dir(filepath.Dir(tmp)) != dir {
			t.Errorf("the socket is made at %s, not in a directory of its own next to %s", tmp, path)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			fi, err := os.Lstat(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case fi.IsDir() && fi.Mode().Perm() != 0o700:
				t.Errorf("%s: a directory of mode %v next to the socket being made", e.Name(), fi.Mode().Perm())
			case fi.Mode()&os.ModeSocket != 0 && fi.Mode().Perm() != 0o600:
				t.Errorf("%s: a socket of mode %v reachable as it is made", e.Name(), fi.Mode().Perm())
			}
		}
	}
	defer func() { afterBind = nil }()
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !checked {
		t.Fatal("the socket was not made under a temporary name")
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 2 { // the socket and its lock
		t.Errorf("left in the socket's directory: %v", names)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the socket: %v %v", fi, err)
	}
}

package secret

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// FileName is the file store's file in the state directory.
const FileName = "secrets.json"

// fileStore keeps secrets in a JSON object in a 0600 file, in a 0700
// directory. Writers hold an flock on a lock file beside it and replace
// the file atomically (a temporary file renamed over it), so that the CLI
// and serve may write at once and a reader never sees half a file.
type fileStore struct {
	dir  string
	path string
}

// OpenFile returns the file store <stateDir>/secrets.json, which is made
// when a secret is first set.
func OpenFile(stateDir string) Store {
	return &fileStore{dir: stateDir, path: filepath.Join(stateDir, FileName)}
}

func (s *fileStore) Backend() string { return "file " + s.path + " (0600)" }

func (s *fileStore) Get(ctx context.Context, name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	m, err := s.read()
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("secret %s: %w", name, ErrNotFound)
	}
	return v, nil
}

func (s *fileStore) List(ctx context.Context) ([]string, error) {
	m, err := s.read()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names, nil
}

func (s *fileStore) Set(ctx context.Context, name, value string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return s.update(ctx, func(m map[string]string) error {
		m[name] = value
		return nil
	})
}

func (s *fileStore) Delete(ctx context.Context, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return s.update(ctx, func(m map[string]string) error {
		if _, ok := m[name]; !ok {
			return fmt.Errorf("secret %s: %w", name, ErrNotFound)
		}
		delete(m, name)
		return nil
	})
}

// read returns the secrets, none if there is no file yet. A file others
// may read is refused: its secrets may have leaked, and the owner should
// know.
func (s *fileStore) read() (map[string]string, error) {
	return readJSONFile(s.path)
}

func readJSONFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secret file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&^0o600 != 0 {
		return nil, fmt.Errorf("secret file %s has mode %04o: others may read it; make it 0600 (chmod 600 %s) and change the secrets it holds", path, perm, path)
	}
	m := map[string]string{}
	dec := json.NewDecoder(f)
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("secret file %s is not a JSON object of strings: %v", path, err)
	}
	return m, nil
}

// update applies fn to the secrets under the lock and writes them back.
func (s *fileStore) update(ctx context.Context, fn func(map[string]string) error) error {
	unlock, err := lockDir(ctx, s.dir, s.path+".lock")
	if err != nil {
		return err
	}
	defer unlock()
	m, err := s.read()
	if err != nil {
		return err
	}
	if err := fn(m); err != nil {
		return err
	}
	return writeJSONFile(s.path, m)
}

// writeJSONFile replaces path with m, atomically, mode 0600.
func writeJSONFile(path string, m map[string]string) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secrets-*.tmp")
	if err != nil {
		return fmt.Errorf("secret file: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("secret file: %w", err)
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("secret file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("secret file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("secret file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("secret file: %w", err)
	}
	return nil
}

// lockDir makes dir (0700: only its owner may enter) if needed and takes
// an exclusive flock on lockPath, waiting within ctx. An existing
// directory keeps its mode: the files in it are 0600.
func lockDir(ctx context.Context, dir, lockPath string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secret store: %w", err)
	}
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("secret store: %w", err)
	}
	// flock blocks in the kernel; try without blocking, then wait in
	// short steps so that ctx bounds the wait.
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("secret store: locking %s: %w", lockPath, err)
		}
		if err := sleepCtx(ctx); err != nil {
			f.Close()
			return nil, fmt.Errorf("secret store: waiting for the lock on %s: %w", lockPath, err)
		}
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

func sleepCtx(ctx context.Context) error {
	t := time.NewTimer(5 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

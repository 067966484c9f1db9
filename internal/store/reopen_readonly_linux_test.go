//go:build linux

package store

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// mountTmpfs mounts a tmpfs of size at a fresh directory, or skips the
// test where mounting is not allowed (not root, no CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// A file system that went read-only under a running mcpvisor (ext4's
// errors=remount-ro) leaves the open state file readable — its pages are
// mapped. ReleaseMemory's reopen must not close it then (it could not open
// it again): every cached list of a dormant server stays readable, and
// stays so once the file system is writable again.
func TestReopenOnAReadOnlyFileSystemKeepsTheStore(t *testing.T) {
	dir := mountTmpfs(t, "64m")
	s := open(t, filepath.Join(dir, "state.db"), Options{})
	learn(t, s, 400) // ≥ reopenPages pages allocated
	if _, ok, err := s.List("s0001", "h", Tools); err != nil || !ok {
		t.Fatalf("before: %v %v", ok, err)
	}
	// The file system goes read-only under the open file: a read-only
	// bind mount over the directory (the open file stays writable, as
	// the file a remount-ro leaves mapped stays readable).
	if out, err := exec.Command("mount", "--bind", "-o", "ro", dir, dir).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount read-only: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "remount,bind,ro", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot remount the bind read-only: %v: %s", err, out)
	}
	// Before the reopen, the mapped file still reads.
	if _, ok, err := s.List("s0001", "h", Tools); err != nil || !ok {
		t.Fatalf("read-only file system, before ReleaseMemory: %v %v", ok, err)
	}
	_ = s.ReleaseMemory()
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Fatalf("umount the read-only bind: %v: %s", err, out)
	}
	// Even with the file system writable again, the store never comes back.
	_ = s.ReleaseMemory()
	if items, ok, err := s.List("s0001", "h", Tools); err != nil || !ok || len(items) != 20 {
		t.Fatalf("after ReleaseMemory on a read-only file system, a cached list reads as %d items, %v, %v: the store dropped a healthy file for good", len(items), ok, err)
	}
}

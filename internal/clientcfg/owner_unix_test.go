//go:build unix

package clientcfg

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func owner(t *testing.T, path string) (int, int) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

// TestAtomicWriteKeepsTheOwner: root (sudo mcpvisor install-client)
// rewriting a user's file leaves it the user's. Run as another user, the
// owner is the user's own and stays so.
func TestAtomicWriteKeepsTheOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, []byte("{}\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 4242, 4343
		if err := os.Chown(path, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteFileAtomic(path, []byte(`{"a":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	gotUID, gotGID := owner(t, path)
	fi, _ := os.Stat(path)
	if gotUID != uid || gotGID != gid || fi.Mode().Perm() != 0o640 {
		t.Errorf("owner %d:%d mode %v, want %d:%d 0640", gotUID, gotGID, fi.Mode().Perm(), uid, gid)
	}
}

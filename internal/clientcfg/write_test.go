package clientcfg

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestAtomicWriteFollowsSymlink: a client config kept in a dotfiles
// repository and linked into place stays a link; its target changes.
func TestAtomicWriteFollowsSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "dotfiles", "claude_desktop_config.json")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "claude_desktop_config.json")
	if err := os.Symlink(filepath.Join("dotfiles", "claude_desktop_config.json"), link); err != nil {
		t.Fatal(err)
	}
	want := `{"mcpServers":{}}` + "\n"
	if err := WriteFileAtomic(link, []byte(want), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(link)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(target)
	if fi.Mode()&os.ModeSymlink == 0 || string(got) != want {
		t.Errorf("link kept %v, target holds %q", fi.Mode()&os.ModeSymlink != 0, got)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*", ".*tmp*")); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}

// TestReplaceFileRefusesAConcurrentWrite: what another program wrote
// since the file was read is not overwritten.
func TestReplaceFileRefusesAConcurrentWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp.json")
	read := []byte(`{"a":1}`)
	if err := os.WriteFile(path, []byte(`{"a":1,"theirs":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := ReplaceFile(path, []byte(`{"mine":1}`), 0o600, read, true)
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("error %v, want ErrChanged", err)
	}
	if got, _ := os.ReadFile(path); string(got) != `{"a":1,"theirs":2}` {
		t.Errorf("the concurrent write was lost: %s", got)
	}
	// A file created meanwhile, where none was read.
	if err := ReplaceFile(path, []byte(`{}`), 0o600, nil, false); !errors.Is(err, ErrChanged) {
		t.Errorf("over a file that appeared: %v", err)
	}
	// Unchanged: written.
	if err := ReplaceFile(path, []byte(`{"mine":1}`), 0o600, []byte(`{"a":1,"theirs":2}`), true); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != `{"mine":1}` {
		t.Errorf("not written: %s", got)
	}
}

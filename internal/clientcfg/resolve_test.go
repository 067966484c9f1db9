package clientcfg

import (
	"os"
	"path/filepath"
	"testing"
)

// A relative link is relative to the directory the link is in, as the
// kernel resolves it: when that directory is reached through a symlinked
// directory (~/.cursor -> dotfiles/cursor), ".." is the real parent, not
// the lexical one. Resolved lexically it would name another file, so
// ReplaceFile would refuse a file nobody changed (ErrChanged) and
// uninstall-client's os.Remove(Resolve(path)) would remove that other file.
func TestResolveRelativeLinkInSymlinkedDir(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "dotfiles", "cursor")
	shared := filepath.Join(root, "dotfiles", "shared")
	for _, d := range []string{real, shared} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(shared, "mcp.json")
	was := []byte(`{"mcpServers":{}}` + "\n")
	if err := os.WriteFile(file, was, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "shared", "mcp.json"), filepath.Join(real, "mcp.json")); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(home, ".cursor")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, ".cursor", "mcp.json")
	if got, err := os.ReadFile(path); err != nil || string(got) != string(was) {
		t.Fatalf("the kernel reads %s: %q %v", path, got, err)
	}
	target, err := Resolve(path)
	if err != nil {
		t.Fatal(err)
	}
	if fa, err1 := os.Stat(target); err1 != nil {
		t.Errorf("Resolve(%s) = %s, which does not exist (%v); the link's file is %s", path, target, err1, file)
	} else if fb, _ := os.Stat(file); !os.SameFile(fa, fb) {
		t.Errorf("Resolve(%s) = %s, not the link's file %s", path, target, file)
	}
	if err := ReplaceFile(path, []byte(`{"mcpServers":{"x":{}}}`+"\n"), 0o600, was, true); err != nil {
		t.Errorf("ReplaceFile of a file nobody changed: %v", err)
	}
}

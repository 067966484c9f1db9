package userdirs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// With no XDG_CONFIG_HOME, XDG_STATE_HOME or HOME, the defaults are in
// the home directory the user database gives; with none there either, in
// a directory of this user's alone under the temp dir (made 0700); never
// in one another user could have made: a temp directory of that name
// that others may enter is refused, saying so, and the defaults then
// name a path that cannot be made.
func TestDefaultsWithoutHome(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	db := t.TempDir()
	old := databaseHome
	t.Cleanup(func() { databaseHome = old })

	databaseHome = func() string { return db }
	if f, err := ConfigFile(); err != nil || f != filepath.Join(db, ".config", "mcpvisor", "config.json") {
		t.Errorf("the config with the database's home: %q %v", f, err)
	}

	databaseHome = func() string { return "" }
	private := filepath.Join(tmp, "mcpvisor-"+strconv.Itoa(os.Getuid()))
	if f, err := ConfigFile(); err != nil || f != filepath.Join(private, ".config", "mcpvisor", "config.json") {
		t.Errorf("the config with no home: %q %v", f, err)
	}
	if d, err := StateDir(); err != nil || d != filepath.Join(private, ".local", "state", "mcpvisor") {
		t.Errorf("the state directory with no home: %q %v", d, err)
	}
	if fi, err := os.Stat(private); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the private directory: %v %v", fi, err)
	}

	// Another's, as far as this user can tell: others may enter it.
	if err := os.Chmod(private, 0o777); err != nil {
		t.Fatal(err)
	}
	for name, get := range map[string]func() (string, error){"config": ConfigFile, "state": StateDir} {
		if p, err := get(); err == nil || !strings.Contains(err.Error(), "mode 0700") || !strings.Contains(err.Error(), "HOME") {
			t.Errorf("the %s default in a temp directory others may enter: %q %v", name, p, err)
		}
	}
	for _, p := range []string{DefaultConfigFile(), DefaultStateDir()} {
		if !strings.HasPrefix(p, NoHome) {
			t.Errorf("a default with no home and no private directory: %q", p)
		}
	}
}

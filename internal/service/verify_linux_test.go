package service

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// systemd-analyze verify --user reads the unit as the user manager would
// and says nothing of it: every setting known and valid, the command line
// split into a binary that exists — at a path with a space and a '%' in
// it, which only the right quoting finds. A unit with a typo in a setting
// makes it speak (the check can fail).
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("this test needs systemd-analyze (Debian's systemd package): %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "mcp visor 100%", "mcpvisor")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := goldenSpec("linux")
	spec.Executable = bin
	def, err := Definition(spec)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(unit []byte) string {
		t.Helper()
		units := t.TempDir()
		path := filepath.Join(units, Unit)
		if err := os.WriteFile(path, unit, 0o644); err != nil {
			t.Fatal(err)
		}
		runtime := t.TempDir() // the user manager's runtime directory, which verify --user needs
		cmd := exec.Command(analyze, "verify", "--user", path)
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime, "SYSTEMD_LOG_COLOR=0")
		out, err := cmd.CombinedOutput()
		if err != nil && len(out) == 0 {
			t.Fatalf("systemd-analyze verify: %v", err)
		}
		return string(bytes.TrimSpace(out))
	}
	if out := verify(def); out != "" {
		t.Errorf("systemd-analyze verify --user says:\n%s\nof:\n%s", out, def)
	}
	bad := strings.Replace(string(def), "KillMode=mixed", "KillMode=mixd", 1)
	if out := verify([]byte(bad)); !strings.Contains(out, "mixd") {
		t.Errorf("a unit with KillMode=mixd verified: %q", out)
	}
}

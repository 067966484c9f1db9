package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// Installed side by side, as `go install ./cmd/...` installs them, mcpvisor
// finds mcpvisor-shim and makes it the init of its servers' pid
// namespaces; alone, it re-executes itself for that job.
func TestInstalledShimIsFound(t *testing.T) {
	built, _ := binaries(t)
	shim := testserver.BuildPackage(t, "github.com/mcpvisor/mcpvisor/cmd/mcpvisor-shim", "mcpvisor-shim-test")
	dir := t.TempDir()
	copyExecutable(t, built, filepath.Join(dir, "mcpvisor"))
	copyExecutable(t, shim, filepath.Join(dir, "mcpvisor-shim"))

	doctor := func(bin string) string {
		out, err := exec.Command(bin, "doctor", "--state-dir", t.TempDir()).CombinedOutput()
		if err != nil {
			t.Fatalf("%s doctor: %v\n%s", bin, err, out)
		}
		return string(out)
	}
	if out, want := doctor(filepath.Join(dir, "mcpvisor")), "init: "+filepath.Join(dir, "mcpvisor-shim"); !strings.Contains(out, want) {
		t.Errorf("installed with the shim, doctor does not say %q:\n%s", want, out)
	}
	if out, want := doctor(built), "init: mcpvisor itself"; !strings.Contains(out, want) {
		t.Errorf("installed alone, doctor does not say %q:\n%s", want, out)
	}
	// A shim that lost its execute bit is named, not silently passed over.
	if err := os.Chmod(filepath.Join(dir, "mcpvisor-shim"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, want := doctor(filepath.Join(dir, "mcpvisor")), "init: mcpvisor itself, re-executed ("+filepath.Join(dir, "mcpvisor-shim")+" is not an executable file)"; !strings.Contains(out, want) {
		t.Errorf("with a non-executable shim, doctor does not say %q:\n%s", want, out)
	}
}

// copyExecutable copies from to to with cp: a copy, so that the test may
// change it, written by another process, so that no descriptor open for
// writing can leak into a concurrent fork and make the exec fail with
// ETXTBSY.
func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp %s %s: %v %s", from, to, err, out)
	}
}

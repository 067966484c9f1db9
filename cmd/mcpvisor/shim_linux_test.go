package main

import (
	"io"
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
}

// copyExecutable links from to to, or copies it where it cannot. A link
// leaves no file open for writing that a concurrent fork could inherit,
// which would make the exec fail with ETXTBSY.
func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	if os.Link(from, to) == nil {
		return
	}
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

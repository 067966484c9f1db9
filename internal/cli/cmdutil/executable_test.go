package cmdutil

import (
	"bytes"

	"github.com/spf13/cobra"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoRunBuildRefused: a client is never pointed at a build that `go
// run` (here `go test`) deletes when it ends.
func TestGoRunBuildRefused(t *testing.T) {
	tmp := os.TempDir()
	for path, want := range map[string]bool{
		filepath.Join(tmp, "go-build123", "b001", "exe", "mcpvisor"): true,
		filepath.Join(tmp, "mcpvisor-test", "mcpvisor"):              false,
		"/usr/local/bin/mcpvisor":                                    false,
	} {
		if got := IsGoRunBuild(path); got != want {
			t.Errorf("IsGoRunBuild(%s) = %v, want %v", path, got, want)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	resolved, _ := filepath.EvalSymlinks(self)
	_, err = Executable()
	if IsGoRunBuild(resolved) != (err != nil) {
		t.Fatalf("this test binary at %s: Executable error %v", resolved, err)
	}
	if err != nil && !strings.Contains(err.Error(), "`go run` build") {
		t.Errorf("the refusal does not say why: %v", err)
	}
}

// Streams a command lacks are its cobra command's, so that SetOut and
// SetErr redirect a command built with none; the streams it has stay.
func TestStreamsOrTheCommands(t *testing.T) {
	cmd := &cobra.Command{}
	var out, errOut, own bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	s := IOStreams{}.Or(cmd)
	if s.Out != &out || s.ErrOut != &errOut || s.In == nil {
		t.Errorf("no streams of its own: %+v", s)
	}
	if s := (IOStreams{Out: &own}).Or(cmd); s.Out != &own || s.ErrOut != &errOut {
		t.Errorf("its own Out: %+v", s)
	}
}

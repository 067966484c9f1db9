package daemon

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Stdio stops its SIGPIPE notification as it returns (the old cmd code
// never did). main then prints the error to stderr: when stderr is a pipe
// whose reader is gone (the desktop client that launched mcpvisor quit),
// that write now kills the process by SIGPIPE instead of ending it with
// the documented exit code (2 here).
// A stdio that fails (here --server naming no server) exits with its
// code even when its client is gone and stderr is a broken pipe: the
// error main prints on the way out must not kill it by SIGPIPE. Run as a
// child of this test, with its stderr a pipe whose reader is closed.
func TestStdioErrorExitSurvivesABrokenStderr(t *testing.T) {
	if os.Getenv("MCPVISOR_SIGPIPE_CHILD") == "1" {
		cfg := filepath.Join(t.TempDir(), "config.json")
		_ = os.WriteFile(cfg, []byte(`{"mcpServers":{"x":{"command":"/bin/sh"}}}`), 0o600)
		err := Stdio(t.Context(), StdioOptions{Options: Options{ConfigFile: cfg, StateDir: t.TempDir(), ShutdownTimeout: 5 * time.Second, NoLearn: true,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Stderr: io.Discard, Version: "test"},
			Server: "nope", Stdin: io.NopCloser(strings.NewReader("")), Stdout: io.Discard})
		fmt.Fprintln(os.Stderr, "mcpvisor:", err) // what main's exitCodeOf does
		os.Exit(2)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone
	cmd := exec.Command(os.Args[0], "-test.run=^TestStdioErrorExitSurvivesABrokenStderr$")
	cmd.Env = append(os.Environ(), "MCPVISOR_SIGPIPE_CHILD=1")
	cmd.Stderr = w
	err = cmd.Run()
	w.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v", err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		t.Fatalf("the child died of %v after Stdio returned, want exit code 2", ws.Signal())
	}
	if ws.ExitStatus() != 2 {
		t.Fatalf("exit %d, want 2", ws.ExitStatus())
	}
}

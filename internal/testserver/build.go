package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// fixturePackage is the import path of the mcp-fixture command.
const fixturePackage = "github.com/mcpvisor/mcpvisor/internal/testserver/cmd/mcp-fixture"

var build struct {
	once sync.Once
	path string
	err  error
}

// Build compiles the mcp-fixture command once per test process, into a
// directory under os.TempDir() of its own, and returns the binary's path. It
// fails the test if the build fails. The directory is left behind.
func Build(tb testing.TB) string {
	tb.Helper()
	build.once.Do(func() { build.path, build.err = buildFixture() })
	if build.err != nil {
		tb.Fatalf("building mcp-fixture: %v", build.err)
	}
	return build.path
}

func buildFixture() (string, error) {
	dir, err := os.MkdirTemp("", fmt.Sprintf("mcp-fixture-%d-", os.Getpid()))
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "mcp-fixture")
	if runtime.GOOS == "windows" {
		out += ".exe"
	}
	cmd := exec.Command("go", "build", "-o", out, fixturePackage)
	cmd.Dir = sourceDir()
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, output)
	}
	return out, nil
}

// sourceDir is the directory of this file, which lies inside the module, or
// "" (the working directory) if it is not known here.
func sourceDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	dir := filepath.Dir(file)
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	return dir
}

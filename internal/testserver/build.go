package testserver

import (
	"crypto/sha256"
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

// Build compiles the mcp-fixture command once per test process and returns
// the binary's path. It fails the test if the build fails. All test
// processes share one directory under os.TempDir(): each builds to a
// private name and renames it into place, so concurrent test binaries never
// see a half-written file and nothing accumulates across runs.
func Build(tb testing.TB) string {
	tb.Helper()
	build.once.Do(func() { build.path, build.err = buildFixture() })
	if build.err != nil {
		tb.Fatalf("building mcp-fixture: %v", build.err)
	}
	return build.path
}

func buildFixture() (string, error) { return buildPackage(fixturePackage, "mcp-fixture") }

var packages struct {
	sync.Mutex
	built map[string]string
}

// BuildPackage compiles the main package pkg (an import path this module
// can build, such as a tool dependency) once per test process into the
// shared test-binary directory as name, and returns the binary's path.
func BuildPackage(tb testing.TB, pkg, name string) string {
	tb.Helper()
	packages.Lock()
	defer packages.Unlock()
	if path, ok := packages.built[pkg]; ok {
		return path
	}
	path, err := buildPackage(pkg, name)
	if err != nil {
		tb.Fatalf("building %s: %v", pkg, err)
	}
	if packages.built == nil {
		packages.built = map[string]string{}
	}
	packages.built[pkg] = path
	return path
}

// buildPackage builds pkg to a private name in the shared directory and
// renames it into place, so concurrent test binaries never see a
// half-written file.
func buildPackage(pkg, name string) (string, error) {
	// One directory per user and checkout: a test run of another copy of
	// the source (older, say) never replaces this one's binaries.
	sum := sha256.Sum256([]byte(sourceDir()))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("mcpvisor-test-bin-%d-%x", os.Getuid(), sum[:4]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	if runtime.GOOS == "windows" {
		out += ".exe"
	}
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, pkg)
	cmd.Dir = sourceDir()
	if output, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("go build: %v\n%s", err, output)
	}
	if err := os.Rename(tmp, out); err != nil {
		_ = os.Remove(tmp)
		return "", err
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

// Deps returns the directory sub of the test dependencies that
// scripts/test-deps.sh installs into .deps/ at the module root (for example
// "npm" for the npm MCP servers). It fails the test with the command to run
// when they are not installed.
func Deps(tb testing.TB, sub string) string {
	tb.Helper()
	dir := sourceDir()
	if dir == "" {
		tb.Fatal("cannot locate the module root to find .deps/")
	}
	p := filepath.Join(dir, "..", "..", ".deps", sub)
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("test dependency %s is missing: run `make test-deps` (scripts/test-deps.sh) first", p)
	}
	return filepath.Clean(p)
}

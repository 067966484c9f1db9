package testserver

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TasksFixture is the path of the tasks fixture (testdata/tasks-server.mjs:
// an MCP server on the TypeScript SDK v2 with the tasks extension and the
// tools the conformance suite's tasks-* scenarios call), copied into a
// directory of the test's whose node_modules are .deps/npm's, where Node
// resolves its packages. Run it with `node PATH stdio`.
func TasksFixture(tb testing.TB) string {
	tb.Helper()
	src, err := os.ReadFile(filepath.Join(sourceDir(), "testdata", "tasks-server.mjs"))
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	if err := os.Symlink(filepath.Join(Deps(tb, "npm"), "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		tb.Fatal(err)
	}
	script := filepath.Join(dir, "tasks-server.mjs")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		tb.Fatal(err)
	}
	return script
}

// LegacyTasksFixture is the path of testdata/legacy-tasks.mjs, a
// 2025-11-25 server of tasks that needs no packages (`node PATH`).
func LegacyTasksFixture(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join(sourceDir(), "testdata", "legacy-tasks.mjs")
	if _, err := os.Stat(p); err != nil {
		tb.Fatal(err)
	}
	return p
}

// StartTasksHTTP runs the tasks fixture over its own Streamable HTTP on a
// free loopback port and returns its URL (…/mcp); it ends with the test
// (its stdin closes).
func StartTasksHTTP(tb testing.TB) string {
	tb.Helper()
	cmd := exec.Command("node", TasksFixture(tb), "http", "0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				url <- u
			}
		}
		close(url)
	}()
	select {
	case u, ok := <-url:
		if !ok {
			tb.Fatal("the tasks fixture ended before it listened")
		}
		return u
	case <-time.After(20 * time.Second):
		tb.Fatal("the tasks fixture did not listen within 20 s")
	}
	return ""
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// TestQuickstart is what a new user does first: serve the bundled example
// (two servers of this repository, run with `go run`, no Node), then list
// both servers' tools through /mcp — with the curl commands the README
// shows, run as written, and with the MCP Inspector CLI.
func TestQuickstart(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	s := startServeFile(t, filepath.Join(root, "examples", "quickstart.json"), root)
	stopAtCleanup(t, s)

	// The README's curl commands, with its port and session placeholder
	// replaced by this server's.
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("the README's quick start uses curl, which is not installed")
	}
	cmds := readmeCurls(t, filepath.Join(root, "README.md"))
	if len(cmds) != 2 {
		t.Fatalf("README quick start: %d curl commands, want 2 (initialize, tools/list)", len(cmds))
	}
	run := func(cmd string) string {
		t.Helper()
		cmd = strings.ReplaceAll(cmd, "http://127.0.0.1:7331", s.base)
		out, err := exec.CommandContext(t.Context(), "sh", "-c", strings.Replace(cmd, "curl ", curl+" ", 1)).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return string(out)
	}
	initOut := run(cmds[0])
	sid := regexp.MustCompile(`(?im)^mcp-session-id:\s*(\S+)`).FindStringSubmatch(initOut)
	if sid == nil || !strings.Contains(initOut, `"result"`) {
		t.Fatalf("initialize with curl gave no session:\n%s", initOut)
	}
	if !strings.Contains(cmds[1], "Mcp-Session-Id: …") {
		t.Fatalf("README's second curl command has no session placeholder: %s", cmds[1])
	}
	listOut := run(strings.ReplaceAll(cmds[1], "Mcp-Session-Id: …", "Mcp-Session-Id: "+sid[1]))
	var listed struct {
		Result struct {
			Tools []struct{ Name string }
		}
	}
	if err := json.Unmarshal([]byte(listOut), &listed); err != nil {
		t.Fatalf("tools/list with curl: %v\n%s", err, listOut)
	}
	var names []string
	for _, tool := range listed.Result.Tools {
		names = append(names, tool.Name)
	}
	checkQuickstartTools(t, "curl", names)

	// The MCP Inspector CLI, on Node 22.
	node, _ := node22(t)
	inspector := filepath.Join(testserver.Deps(t, "npm"), "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")
	home := t.TempDir() // the Inspector keeps a catalog under $HOME
	inspect := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, append([]string{inspector, "--cli", s.base + "/mcp"}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("inspector %v: %v\n%s", args, err, out)
		}
		return out
	}
	var tools struct{ Tools []struct{ Name string } }
	if out := inspect("--method", "tools/list"); json.Unmarshal(out, &tools) != nil {
		t.Fatalf("inspector tools/list printed %s", out)
	}
	names = names[:0]
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	checkQuickstartTools(t, "inspector", names)
	var called struct {
		Content []struct{ Text string }
	}
	out := inspect("--method", "tools/call", "--tool-name", "slow__echo", "--tool-arg", "text=hello from the inspector")
	if json.Unmarshal(out, &called) != nil || len(called.Content) != 1 || called.Content[0].Text != "hello from the inspector" {
		t.Fatalf("inspector tools/call slow__echo printed %s", out)
	}
	// Both protocol eras, chosen explicitly: 2026-07-28 (stateless) and
	// the legacy session.
	for _, era := range []string{"modern", "legacy"} {
		called.Content = nil
		out := inspect("--protocol-era", era, "--method", "tools/call", "--tool-name", "demo__echo", "--tool-arg", "text=era "+era)
		if json.Unmarshal(out, &called) != nil || len(called.Content) != 1 || called.Content[0].Text != "era "+era {
			t.Fatalf("inspector --protocol-era %s tools/call printed %s", era, out)
		}
	}
}

// checkQuickstartTools checks that both example servers' tools are listed,
// prefixed, and that the "slow" server's deny filter holds.
func checkQuickstartTools(t *testing.T, by string, names []string) {
	t.Helper()
	for _, want := range []string{"demo__echo", "demo__crash", "slow__echo", "slow__sleep"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s: %s is not listed: %v", by, want, names)
		}
	}
	if slices.Contains(names, "slow__crash") {
		t.Errorf("%s: slow__crash is listed although the example denies it", by)
	}
}

// readmeCurls returns the curl commands of the README's quick start, each
// with its continuation lines joined.
func readmeCurls(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	cur := ""
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case cur != "":
			cur += " " + strings.TrimSpace(strings.TrimSuffix(line, `\`))
		case strings.HasPrefix(line, "curl "):
			cur = strings.TrimSuffix(line, `\`)
		default:
			continue
		}
		if !strings.HasSuffix(line, `\`) {
			cmds = append(cmds, cur)
			cur = ""
		}
	}
	return cmds
}

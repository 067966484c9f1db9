package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// tsResult is what testdata/tsclient.mjs reports.
type tsResult struct {
	Version, Era, Text, ProgressResult, Error string
	Sampled, Elicited                         string
	Tools, Logs                               []string
	Progress, Repeated                        int
}

// runTSClientEnv runs the TypeScript SDK v2 client in mode against
// target, with env added to the client's.
func runTSClientEnv(t *testing.T, env []string, mode string, target ...string) tsResult {
	t.Helper()
	node, _ := node22(t)
	script, err := filepath.Abs("testdata/tsclient.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// Node resolves the SDK from the script's directory upwards: run a
	// copy next to the installed packages.
	dir := testserver.Deps(t, "npm-next")
	copyPath := filepath.Join(dir, "tsclient-"+filepath.Base(t.TempDir())+".mjs")
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(copyPath)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{copyPath, mode}, target...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TypeScript client (%s): %v\n%s", mode, err, out)
	}
	var r tsResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("the TypeScript client said %q: %v", out, err)
	}
	if r.Error != "" {
		t.Fatalf("the TypeScript client (%s %v) failed: %s", mode, target, r.Error)
	}
	return r
}

// The TypeScript SDK v2 client, at 2026-07-28 (pinned, and auto, which
// probes) and legacy, uses mcpvisor's /mcp, a per-server endpoint and
// mcpvisor stdio over our fixture: the negotiated version, lists, calls,
// progress, a log line at the level it asked for, and sampling (at
// 2026-07-28 through an input_required round).
func TestTypeScriptClient(t *testing.T) {
	bin, _ := binaries(t)
	fixture := testserver.Build(t)
	// A server per case: a log line of a shared legacy server reaches a
	// request only while no other client's request there ended lately
	// (the gateway's linger), so the cases do not share one.
	cfgJSON := fmt.Sprintf(`{"mcpServers":{"x1":{"command":%[1]q},"x2":{"command":%[1]q},"x3":{"command":%[1]q},"x4":{"command":%[1]q},"x5":{"command":%[1]q},"x6":{"command":%[1]q}}}`, fixture)
	base := serve(t, cfgJSON)
	cfg := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(cfg, []byte(cfgJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode, version, prefix string
		target                []string
	}{
		{"pin", "2026-07-28", "x1__", []string{base + "/mcp"}},
		{"auto", "2026-07-28", "x2__", []string{base + "/mcp"}},
		{"auto", "2026-07-28", "", []string{base + "/servers/x3/mcp"}},
		{"legacy", "2025-11-25", "x4__", []string{base + "/mcp"}},
		{"pin", "2026-07-28", "x5__", []string{"stdio", bin, "stdio", "--config", cfg, "--state-dir", t.TempDir()}},
		{"legacy", "2025-11-25", "x6__", []string{"stdio", bin, "stdio", "--config", cfg, "--state-dir", t.TempDir()}},
	} {
		r := runTSClientEnv(t, []string{"TS_TOOL_PREFIX=" + tc.prefix}, tc.mode, tc.target...)
		// Over stdio the TypeScript client reports progress that comes in
		// the same read as the result unevenly — as it does talking to the
		// fixture directly — so only HTTP is held to every notification.
		wantProgress := 3
		if tc.target[0] == "stdio" {
			wantProgress = 0
		}
		if r.Version != tc.version || r.Text != "from typescript" || r.ProgressResult != "done" || r.Progress < wantProgress ||
			!slices.Contains(r.Tools, tc.prefix+"echo") ||
			r.Sampled != "sampled: ts answer to capital?" || !slices.Contains(r.Logs, "ts log line") {
			t.Errorf("%s %v: %+v", tc.mode, tc.target[0], r)
		}
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// The TypeScript SDK v2 client launches `mcpvisor connect` as its stdio
// server, as a desktop client configured by install-client does, at
// 2026-07-28 and at 2025-11-25: the first connect starts the shared
// daemon, the second reaches the same one; lists, calls, progress, a log
// line and sampling (at 2026-07-28 through an input_required round) all
// pass through the relay.
func TestTypeScriptClientThroughConnect(t *testing.T) {
	bin, _ := binaries(t)
	dir := t.TempDir()
	w := &connectWorld{cfg: filepath.Join(dir, "config.json"), state: filepath.Join(dir, "state"), marker: testserver.NewMarker(t)}
	// A server per case (see TestTypeScriptClient: a shared legacy
	// server's log line reaches a request only while no other client's
	// request there ended lately).
	fixture := testserver.Build(t)
	if err := os.WriteFile(w.cfg, []byte(fmt.Sprintf(`{"listen":"127.0.0.1:0","mcpServers":{"t1":{"command":%[1]q},"t2":{"command":%[1]q}}}`, fixture)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range w.daemons() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		testserver.WaitGone(t, w.marker, 5*time.Second)
	})
	env := []string{testserver.MarkerEnv + "=" + w.marker}
	var daemons [][]int
	for _, tc := range []struct{ mode, version, prefix string }{
		{"pin", "2026-07-28", "t1__"},
		{"legacy", "2025-11-25", "t2__"},
	} {
		r := runTSClientEnv(t, append(env, "TS_TOOL_PREFIX="+tc.prefix), tc.mode, "stdio", bin, "connect", "--config", w.cfg, "--state-dir", w.state, "--idle-exit", "10m")
		if r.Version != tc.version || r.Text != "from typescript" || r.ProgressResult != "done" ||
			!slices.Contains(r.Tools, tc.prefix+"echo") ||
			r.Sampled != "sampled: ts answer to capital?" || !slices.Contains(r.Logs, "ts log line") {
			t.Errorf("%s through connect: %+v", tc.mode, r)
		}
		daemons = append(daemons, w.daemons())
	}
	if len(daemons[0]) != 1 || !slices.Equal(daemons[0], daemons[1]) {
		t.Fatalf("daemons after each client: %v; want the one the first client started, still serving the second", daemons)
	}
}

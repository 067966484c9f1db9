package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/telemetry/otlptest"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// mcpvisor serve --otlp-endpoint: a known sequence of calls (two
// successes, an isError result, a timeout) shows in /metrics by outcome
// and tool, and in /api/servers with what the server's process uses (a
// fixture holding 32 MiB and spinning 200 ms at start), and initialize,
// which mcpvisor answers itself, in mcpvisor_gateway_requests_total; every
// request's span reaches the OTLP receiver by the time mcpvisor has exited
// on SIGTERM, cleanly.
func TestServeMetricsAndTracing(t *testing.T) {
	rcv := otlptest.New(t)
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"a":{"command":%q,"env":{"FIXTURE_HOLD_MB":"32","FIXTURE_SPIN":"200ms"},"requestTimeout":"500ms"}}}`, fixture),
		"--otlp-endpoint", strings.TrimSuffix(rcv.URL, "/v1/traces"))
	sess := connectHTTP(t, s.base+"/mcp", nil)
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return nil
		}
		return res
	}
	for range 2 {
		if r := call("a__echo", map[string]any{"text": "hi"}); r == nil || r.IsError {
			t.Fatalf("echo: %+v", r)
		}
	}
	if r := call("a__echo", map[string]any{"text": 5}); r == nil || !r.IsError {
		t.Fatalf("echo with a number: %+v, want isError", r)
	}
	if r := call("a__sleep", map[string]any{"ms": 30000}); r != nil {
		t.Fatalf("sleep past the timeout answered %+v", r)
	}

	m := scrape(t, s.base)
	for series, want := range map[string]float64{
		`mcpvisor_server_calls_total{server="a",outcome="ok"}`:                                                                                 2,
		`mcpvisor_gateway_requests_total{method="initialize",outcome="ok"}`:                                                                    1,
		`mcpvisor_gateway_requests_total{method="tools/call",outcome="ok"}`:                                                                    0,
		`mcpvisor_server_calls_total{server="a",outcome="tool_error"}`:                                                                         1,
		`mcpvisor_server_calls_total{server="a",outcome="timeout"}`:                                                                            1,
		`mcp_server_operation_duration_seconds_count{server="a",mcp_method_name="tools/call",gen_ai_tool_name="echo"}`:                         2,
		`mcp_server_operation_duration_seconds_count{server="a",mcp_method_name="tools/call",gen_ai_tool_name="echo",error_type="tool_error"}`: 1,
		`mcp_server_operation_duration_seconds_count{server="a",mcp_method_name="tools/call",gen_ai_tool_name="sleep",error_type="timeout"}`:   1,
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
	resp, err := http.Get(s.base + "/api/servers")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Servers []struct {
			Name            string
			MemoryBytes     uint64
			MemoryPeakBytes uint64
			CPUSeconds      float64
			PIDs            int `json:"pids"`
			Spawns          int
			Calls           map[string]int
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Servers) != 1 {
		t.Fatalf("/api/servers: %v %+v", err, st)
	}
	row := st.Servers[0]
	// One observation per spawn: the learn at start spawns it, and rests
	// it unless a call came first, so the next call may spawn it again.
	if n := m[`mcpvisor_server_spawn_duration_seconds_count{server="a"}`]; row.Spawns < 1 || n != float64(row.Spawns) {
		t.Errorf("mcpvisor_server_spawn_duration_seconds_count = %v, want the %d spawns /api/servers counts", n, row.Spawns)
	}
	if row.Calls["ok"] != 2 || row.Calls["toolError"] != 1 || row.Calls["timeout"] != 1 {
		t.Errorf("calls %v", row.Calls)
	}
	if runtime.GOOS == "linux" {
		if row.MemoryBytes < 32<<20 || row.MemoryPeakBytes < row.MemoryBytes || row.CPUSeconds < 0.15 || row.PIDs < 1 {
			t.Errorf("usage %+v: want ≥ 32 MiB, a peak no lower, ≥ 0.2 CPU s, tasks", row)
		}
		if m[`mcpvisor_server_memory_peak_bytes{server="a"}`] < 32<<20 || m[`mcpvisor_server_cpu_seconds_total{server="a"}`] < 0.15 {
			t.Errorf("usage series: peak %v, cpu %v", m[`mcpvisor_server_memory_peak_bytes{server="a"}`], m[`mcpvisor_server_cpu_seconds_total{server="a"}`])
		}
	}

	sent := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if code, _ := s.exit(t, sent, 15*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	testserver.WaitGone(t, s.marker, 2*time.Second)
	spans := rcv.Spans() // exported before mcpvisor exited
	names := map[string]int{}
	for _, sp := range spans {
		names[sp.Name+" "+sp.Attrs["mcpvisor.outcome"].(string)]++
		// The session is named as mcpvisor's events name it, never by
		// the Mcp-Session-Id that grants its use.
		if id, _ := sp.Attrs["mcp.session.id"].(string); id == "" || id == sess.ID() {
			t.Errorf("span %s: mcp.session.id %q (the client's session id is %q)", sp.Name, id, sess.ID())
		}
	}
	want := map[string]int{"initialize ok": 1, "tools/call echo ok": 2, "tools/call echo tool_error": 1, "tools/call sleep timeout": 1}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("spans at exit %v, want %v", names, want)
	}
}

// A bad --otlp-endpoint, or a bad OTLP setting in the environment, is a
// usage error that names it, before anything starts.
func TestOTLPEndpointRefused(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(cfg, []byte(`{"mcpServers":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"serve", "stdio"} {
		code, _, stderr := runBin(t, cmd, "--config", cfg, "--otlp-endpoint", "ftp://collector:4318")
		if code != 2 || !strings.Contains(stderr, "--otlp-endpoint") {
			t.Errorf("%s with a bad --otlp-endpoint: exit %d, %q", cmd, code, stderr)
		}
	}
}

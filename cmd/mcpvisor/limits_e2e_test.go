package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A server that grows past its memory limit is killed by the kernel,
// classified oom from its cgroup's OOM-kill counter, reported so — the
// exited event, ps, inspect, events, /api/servers and /metrics — and
// restarted by its policy; its next process serves again. (This machine
// has the cgroup memory controller: without it the server would not be
// killed, and the test fails.)
func TestMemoryLimitOOMEndToEnd(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"bloat":{"command":%q,"eager":true,"idleTimeout":0,
		"limits":{"memory":"64MiB","pids":64},
		"restart":{"policy":"on-failure","maxAttempts":3,"backoff":{"initial":"100ms"}}}}}`, fixture))
	stopAtCleanup(t, s)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")
	first := waitRunning(t, base, "bloat")["bloat"]

	sess := connectHTTP(t, base+"/servers/bloat/mcp", nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	asked := time.Now()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "grow", Arguments: map[string]any{"mb": 512}})
	if err == nil && !res.IsError {
		t.Fatalf("the server grew 512 MiB under a 64 MiB limit: %s", text(res))
	}
	ev := waitEvent(t, base, "exited", 1)
	if ev.Details["kind"] != "oom" || ev.Details["oomKills"] == nil || ev.Details["memoryLimitBytes"] != float64(64<<20) {
		t.Fatalf("exited event %v", ev.Details)
	}
	if msg, _ := ev.Details["error"].(string); !strings.Contains(msg, "killed by its memory limit") {
		t.Errorf("exited event's error: %q", msg)
	}
	t.Logf("oom classified %v after the call began (exited event at %v)", ev.Time.Sub(asked).Round(time.Millisecond), ev.Time.Format(time.TimeOnly))
	waitEvent(t, base, "restarted", 1)
	second := waitRunning(t, base, "bloat")["bloat"]
	if second == first {
		t.Fatalf("still pid %d after the OOM kill", first)
	}
	if res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "back"}}); err != nil || text(res) != "back" {
		t.Fatalf("the restarted server: %v %v", res, err)
	}

	st := servers(t, base)["bloat"]
	if st.OOMKills != 1 || st.Limits == nil || st.Limits.MemoryBytes != 64<<20 || st.Limits.PIDs != 64 || len(st.Limits.NotEnforced) != 0 {
		t.Errorf("/api/servers row: oomKills %d, limits %+v", st.OOMKills, st.Limits)
	}
	if st.MemoryBytes == 0 || st.MemoryBytes > 64<<20 || st.PIDs == 0 || st.PIDs > 64 {
		t.Errorf("usage of the limited server: memory %d, tasks %d", st.MemoryBytes, st.PIDs)
	}
	m := scrapeUntil(t, base, `mcpvisor_server_oom_kills_total{server="bloat"}`, 1)
	if m[`mcpvisor_server_memory_limit_bytes{server="bloat"}`] != 64<<20 || m[`mcpvisor_server_pids_limit{server="bloat"}`] != 64 || m[`mcpvisor_server_limits_not_enforced{server="bloat"}`] != 0 {
		t.Errorf("limit metrics: %v %v %v", m[`mcpvisor_server_memory_limit_bytes{server="bloat"}`], m[`mcpvisor_server_pids_limit{server="bloat"}`], m[`mcpvisor_server_limits_not_enforced{server="bloat"}`])
	}

	_, ps, _ := runBin(t, "ps", "--addr", addr)
	if !strings.Contains(ps, "bloat: oom: killed 1 time(s) by its memory limit (64 MiB)") {
		t.Errorf("ps:\n%s", ps)
	}
	_, detail, _ := runBin(t, "inspect", "bloat", "--addr", addr)
	flat := strings.Join(strings.Fields(detail), " ")
	for _, want := range []string{"Limits: memory 64 MiB", "OOM kills: 1", "serving oom exit -1"} {
		if !strings.Contains(flat, want) {
			t.Errorf("inspect does not say %q:\n%s", want, detail)
		}
	}
	// Beside the limit, what it counts now, while a tree runs (the
	// cgroup's charge, not the resident memory shown as Memory).
	if !regexp.MustCompile(`Limits: memory 64 MiB( \([0-9.]+ [KMG]iB counted against it now\))?, pids 64`).MatchString(flat) {
		t.Errorf("inspect's limits line:\n%s", detail)
	}
	_, events, _ := runBin(t, "events", "--addr", addr, "--server", "bloat")
	if !strings.Contains(events, `kind="oom"`) {
		t.Errorf("events:\n%s", events)
	}
}

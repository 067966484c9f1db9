package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// /metrics and the live event stream, on the real binary: a server's
// start, dormancy and respawn show in both, and SIGTERM ends the stream
// after every server's stop, without holding the shutdown up.
func TestMetricsAndEventStream(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"a":{"command":%q,"idleTimeout":"300ms","startGrace":"0s"},"b":{"command":%q}}}`, fixture, fixture), "--no-learn")

	resp, err := http.Get(s.base + "/api/events?follow")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("event stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan map[string]any, 64)
	go func() {
		defer close(events)
		for data, err := range sseData(resp.Body) { // a stream that breaks ends as one that ends
			if err != nil {
				return
			}
			var e map[string]any
			_ = json.Unmarshal(data, &e)
			events <- e
		}
	}()
	// next waits for the event want ("server type"), passing over others:
	// learning lists starts b when a is first used, and a slow machine may
	// let a sleep and wake once more than the test asks.
	next := func(want string) map[string]any {
		t.Helper()
		for {
			select {
			case e, ok := <-events:
				if !ok {
					t.Fatalf("the stream ended before %s", want)
				}
				if fmt.Sprint(e["server"], " ", e["type"]) == want {
					return e
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s event", want)
			}
		}
	}

	sess := connectHTTP(t, s.base+"/mcp", nil)
	call := func(tool string) {
		t.Helper()
		if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	call("a__echo")
	next("a started")
	next("a dormant")
	m := scrapeUntil(t, s.base, `mcpvisor_server_state{server="a",state="dormant"}`, 1)
	for series, want := range map[string]float64{
		`mcpvisor_server_state{server="a",state="running"}`: 0,
		`mcpvisor_server_memory_bytes{server="a"}`:          0,
		`mcpvisor_server_start_time_seconds{server="a"}`:    0,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	dormant, respawned, spawns := m[`mcpvisor_events_total{server="a",type="dormant"}`],
		m[`mcpvisor_events_total{server="a",type="respawned"}`], m[`mcpvisor_server_spawns_total{server="a"}`]
	if dormant < 1 || spawns != respawned+1 {
		t.Errorf("a went dormant %v times, respawned %v times and spawned %v times", dormant, respawned, spawns)
	}
	requests := m[`mcpvisor_server_requests_total{server="a"}`]
	if requests < 1 {
		t.Errorf("requests of a: %v", requests)
	}
	// The respawning call is held in flight while /metrics is read, so a
	// cannot go dormant again in between.
	held := make(chan error, 1)
	go func() {
		_, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "a__sleep", Arguments: map[string]any{"ms": 1500}})
		held <- err
	}()
	if e := next("a respawned"); e["id"] == nil || e["details"].(map[string]any)["respawnMs"] == nil {
		t.Errorf("respawned event without id or respawn time: %v", e)
	}
	m = scrapeUntil(t, s.base, `mcpvisor_server_in_flight{server="a"}`, 1)
	for series, want := range map[string]float64{
		`mcpvisor_server_state{server="a",state="running"}`:  1,
		`mcpvisor_server_requests_total{server="a"}`:         requests + 1,
		`mcpvisor_server_spawns_total{server="a"}`:           spawns + 1,
		`mcpvisor_events_total{server="a",type="respawned"}`: respawned + 1,
		`mcpvisor_event_streams`:                             1,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if runtime.GOOS == "linux" && m[`mcpvisor_server_memory_bytes{server="a"}`] < 1<<20 {
		t.Errorf("a running server's tree holds %v bytes", m[`mcpvisor_server_memory_bytes{server="a"}`])
	}
	if m[`mcpvisor_server_start_time_seconds{server="a"}`] < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("start time of a: %v", m[`mcpvisor_server_start_time_seconds{server="a"}`])
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	call("b__echo") // b runs at the signal: its stop must be streamed

	sent := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	stopped := map[string]bool{}
	for ended := false; !ended; {
		select {
		case e, ok := <-events:
			ended = !ok
			if ok && e["type"] == "stopped" {
				stopped[fmt.Sprint(e["server"])] = true
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the event stream did not end with the shutdown")
		}
	}
	code, took := s.exit(t, sent, 2*time.Second)
	if code != 0 || took > 2*time.Second {
		t.Errorf("with a live event stream open: exit code %d after %v, want 0 within 2s", code, took)
	}
	// a may have gone dormant again before the signal; b was running.
	if !stopped["b"] {
		t.Errorf("the stream ended without b's stop: %v", stopped)
	}
	gone(t, s.marker)
}

// scrapeUntil reads /metrics until series has value v.
func scrapeUntil(t *testing.T, base, series string, v float64) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := scrape(t, base)
		if m[series] == v {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, not %v, after 10 s", series, m[series], v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scrape reads /metrics into its samples by series.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// A per-session server's processes count in its memory, though its
// shared instance never runs.
func TestPerSessionMemory(t *testing.T) {
	fixture := testserver.Build(t)
	srv := startServe(t, fmt.Sprintf(`{"mcpServers":{"p":{"command":%q,"sharing":"per-session"}}}`, fixture), "--no-learn")
	stopAtCleanup(t, srv)
	base := srv.base
	for range 2 {
		sess := connectHTTP(t, base+"/mcp", nil)
		if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "p__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get(base + "/api/servers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st admin.Servers
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if len(st.Servers) != 1 || st.Servers[0].Sessions != 2 {
		t.Fatalf("status %+v, want p with 2 sessions", st.Servers)
	}
	if runtime.GOOS != "linux" {
		return
	}
	// Every process of the server's trees carries the marker (as does
	// mcpvisor): the two sessions' fixtures, the shared instance's, which
	// lists the tools, and their inits where there is a pid namespace.
	var sum uint64
	var procs []int
	for _, pid := range testserver.LiveProcesses(srv.marker) {
		if pid == srv.cmd.Process.Pid {
			continue
		}
		procs = append(procs, pid)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
		if err != nil {
			t.Fatal(err)
		}
		var size, resident uint64
		fmt.Sscan(string(b), &size, &resident)
		sum += resident * uint64(os.Getpagesize())
	}
	got := st.Servers[0].MemoryBytes
	if len(procs) < 2 || float64(got) < 0.8*float64(sum) || float64(got) > 1.25*float64(sum) || st.Totals.MemoryBytes != got {
		t.Errorf("two sessions' trees hold %d bytes (total %d), want about %d, the sum over their %d processes", got, st.Totals.MemoryBytes, sum, len(procs))
	}
}

// A request to the endpoint of a server that is not configured gets its
// 404 and is counted as refused for unknown_server, nothing else moving.
func TestUnknownServerEndpointCounted(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"a":{"command":%q}}}`, fixture), "--no-learn")
	const series = `mcpvisor_http_refusals_total{reason="unknown_server"}`
	before := scrape(t, s.base)
	resp, err := http.Post(s.base+"/servers/nope/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /servers/nope/mcp: %d, want 404", resp.StatusCode)
	}
	after := scrape(t, s.base)
	if after[series] != before[series]+1 {
		t.Fatalf("%s went %v → %v, want +1", series, before[series], after[series])
	}
	for k, v := range after {
		if k != series && (strings.HasPrefix(k, "mcpvisor_http_refusals_total") || strings.HasPrefix(k, "mcpvisor_gateway_requests_total")) && v != before[k] {
			t.Fatalf("%s moved too: %v → %v", k, before[k], v)
		}
	}
}

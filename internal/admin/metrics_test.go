package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

func tools(names ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(names))
	for i, n := range names {
		out[i] = json.RawMessage(fmt.Sprintf(`{"name":%q}`, n))
	}
	return out
}

// The calls a server served show in /metrics — by outcome, in the
// OpenTelemetry duration histogram by method, tool and error type, as
// bytes — and in its /api/servers row; its spawns and wakes as
// histograms. A server that served nothing has every outcome at zero and
// no duration series.
func TestCallMetricsExposition(t *testing.T) {
	f := testFleet(t)
	tel := f.Get("a").Telemetry()
	list := tools("echo", "sleep")
	for _, c := range []telemetry.Call{
		{Method: "tools/call", Tool: []byte("echo"), Tools: list, Duration: 5 * time.Millisecond, Sent: 20, Received: 50},
		{Method: "tools/call", Tool: []byte("echo"), Tools: list, Duration: 30 * time.Millisecond, Sent: 20, Received: 50},
		{Method: "tools/call", Tool: []byte("echo"), Tools: list, Outcome: telemetry.ToolError, Duration: time.Millisecond},
		{Method: "tools/call", Tool: []byte("sleep"), Tools: list, Outcome: telemetry.Timeout, Duration: 300 * time.Millisecond},
		{Method: "tools/call", Tool: []byte("made-up"), Tools: list, Outcome: telemetry.ProtocolError, Code: -32602, Duration: time.Millisecond},
		{Method: "resources/read", Outcome: telemetry.Cancelled, Duration: time.Millisecond},
	} {
		tel.Record(c)
	}
	tel.ObserveSpawn(40 * time.Millisecond)
	tel.ObserveSpawn(2 * time.Second)
	tel.ObserveWake(2 * time.Second)

	srv := httptest.NewServer(New(f, nil, Options{}))
	defer srv.Close()
	body, _ := io.ReadAll(get(t, srv.URL+"/metrics").Body)
	samples := parseExposition(t, string(body))
	const op = "mcp_server_operation_duration_seconds"
	for series, want := range map[string]float64{
		`mcpvisor_server_calls_total{server="a",outcome="ok"}`:                                                         2,
		`mcpvisor_server_calls_total{server="a",outcome="tool_error"}`:                                                 1,
		`mcpvisor_server_calls_total{server="a",outcome="protocol_error"}`:                                             1,
		`mcpvisor_server_calls_total{server="a",outcome="timeout"}`:                                                    1,
		`mcpvisor_server_calls_total{server="a",outcome="cancelled"}`:                                                  1,
		`mcpvisor_server_calls_total{server="a",outcome="unavailable"}`:                                                0,
		`mcpvisor_server_calls_total{server="b",outcome="ok"}`:                                                         0,
		`mcpvisor_server_relayed_bytes_total{server="a",direction="to_server"}`:                                        40,
		`mcpvisor_server_relayed_bytes_total{server="a",direction="to_client"}`:                                        100,
		op + `_bucket{server="a",mcp_method_name="tools/call",gen_ai_tool_name="echo",le="0.01"}`:                      1,
		op + `_bucket{server="a",mcp_method_name="tools/call",gen_ai_tool_name="echo",le="0.05"}`:                      2,
		op + `_bucket{server="a",mcp_method_name="tools/call",gen_ai_tool_name="echo",le="+Inf"}`:                      2,
		op + `_count{server="a",mcp_method_name="tools/call",gen_ai_tool_name="echo"}`:                                 2,
		op + `_sum{server="a",mcp_method_name="tools/call",gen_ai_tool_name="echo"}`:                                   0.035,
		op + `_count{server="a",mcp_method_name="tools/call",gen_ai_tool_name="echo",error_type="tool_error"}`:         1,
		op + `_bucket{server="a",mcp_method_name="tools/call",gen_ai_tool_name="sleep",error_type="timeout",le="0.2"}`: 0,
		op + `_bucket{server="a",mcp_method_name="tools/call",gen_ai_tool_name="sleep",error_type="timeout",le="0.5"}`: 1,
		op + `_count{server="a",mcp_method_name="tools/call",gen_ai_tool_name="_OTHER",error_type="-32602"}`:           1,
		op + `_count{server="a",mcp_method_name="resources/read",error_type="cancelled"}`:                              1,
		`mcpvisor_server_spawn_duration_seconds_bucket{server="a",le="0.05"}`:                                          1,
		`mcpvisor_server_spawn_duration_seconds_bucket{server="a",le="2.5"}`:                                           2,
		`mcpvisor_server_spawn_duration_seconds_count{server="a"}`:                                                     2,
		`mcpvisor_server_wake_duration_seconds_count{server="a"}`:                                                      1,
		`mcpvisor_server_wake_duration_seconds_count{server="b"}`:                                                      0,
		`mcpvisor_server_memory_peak_bytes{server="a"}`:                                                                0,
		`mcpvisor_server_cpu_seconds_total{server="a"}`:                                                                0,
		`mcpvisor_server_pids{server="a"}`:                                                                             0,
	} {
		got, ok := samples[series]
		if !ok {
			t.Errorf("no %s", series)
		} else if got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for series := range samples {
		if strings.HasPrefix(series, op) && strings.Contains(series, `server="b"`) {
			t.Errorf("a server that served nothing has %s", series)
		}
	}

	var raw struct {
		Servers []map[string]json.RawMessage `json:"servers"`
	}
	if err := json.NewDecoder(get(t, srv.URL+"/api/servers").Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	row := raw.Servers[0]
	var calls map[string]int
	_ = json.Unmarshal(row["calls"], &calls)
	if want := map[string]int{"ok": 2, "toolError": 1, "protocolError": 1, "timeout": 1, "cancelled": 1, "unavailable": 0}; fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("calls of a: %s, want %v", row["calls"], want)
	}
	for _, k := range []string{"memoryPeakBytes", "cpuSeconds", "pids"} {
		if _, ok := row[k]; ok {
			t.Errorf("%s shown for a server with no process: %s", k, row[k])
		}
	}
}

// With 100 servers of 20 tools each, every tool called, /metrics holds
// exactly the series the formula says — per server the fixed ones and 17
// per tool (14 buckets, +Inf, sum, count) — and calls to any number of
// names no server lists add one series group per server, not one per name.
func TestMetricsSeriesBound(t *testing.T) {
	const servers, perServer = 100, 20
	var sb strings.Builder
	sb.WriteString(`{"mcpServers":{`)
	for i := range servers {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"s%03d":{"command":"x"}`, i)
	}
	sb.WriteString(`}}`)
	cfg, err := config.Parse([]byte(sb.String()), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.New(cfg, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, perServer)
	for i := range names {
		names[i] = fmt.Sprintf("tool_%02d", i)
	}
	list := tools(names...)
	for _, s := range f.Servers() {
		for _, n := range names {
			s.Telemetry().Record(telemetry.Call{Method: "tools/call", Tool: []byte(n), Tools: list, Duration: time.Millisecond})
		}
	}
	srv := httptest.NewServer(New(f, nil, Options{}))
	defer srv.Close()
	count := func() int {
		body, _ := io.ReadAll(get(t, srv.URL+"/metrics").Body)
		return len(parseExposition(t, string(body)))
	}
	histogram := len(telemetry.OperationBuckets) + 3 // buckets, +Inf, sum, count
	startHist := len(telemetry.StartBuckets) + 3
	// Per server: 8 states, 10 gauges, requests, the event types, 6
	// outcomes, 2 byte directions, the spawn and wake histograms.
	fixed := len(states) + len(serverGauges) + 1 + len(eventTypes) + int(telemetry.NumOutcomes) + 2 + 2*startHist
	global := len(states) + 7 + len(globalEventTypes) // servers by state; streams, goroutines, Go memory ×3, resident memory, start time; reload events
	if _, ok := residentBytes(); !ok {
		global-- // not measured outside Linux
	}
	want := servers*(fixed+perServer*histogram) + global
	got := count()
	if got != want {
		t.Errorf("%d series, want %d = %d servers × (%d + %d tools × %d) + %d", got, want, servers, fixed, perServer, histogram, global)
	}
	t.Logf("/metrics with %d servers × %d tools, every tool called: %d series", servers, perServer, got)

	for _, s := range f.Servers() {
		for i := range 50 {
			s.Telemetry().Record(telemetry.Call{Method: "tools/call", Tool: fmt.Appendf(nil, "unlisted_%d", i), Tools: list})
		}
	}
	if got, want := count(), want+servers*histogram; got != want {
		t.Errorf("after calls to 50 unlisted names per server: %d series, want %d", got, want)
	}
}

// The requests mcpvisor answers itself show as
// mcpvisor_gateway_requests_total by method and outcome: every MCP method
// and _OTHER, every outcome, from zero — a bounded set, whatever methods
// clients make up.
func TestGatewayRequestsExposition(t *testing.T) {
	f := testFleet(t)
	var local telemetry.Local
	local.Record("ping", telemetry.OK)
	local.Record("ping", telemetry.OK)
	local.Record("tools/call", telemetry.ProtocolError)
	for i := range 100 {
		local.Record(fmt.Sprintf("made/up/%d", i), telemetry.ProtocolError)
	}
	srv := httptest.NewServer(New(f, nil, Options{Local: &local}))
	defer srv.Close()
	body, _ := io.ReadAll(get(t, srv.URL+"/metrics").Body)
	samples := parseExposition(t, string(body))
	for series, want := range map[string]float64{
		`mcpvisor_gateway_requests_total{method="ping",outcome="ok"}`:                   2,
		`mcpvisor_gateway_requests_total{method="tools/call",outcome="protocol_error"}`: 1,
		`mcpvisor_gateway_requests_total{method="_OTHER",outcome="protocol_error"}`:     100,
		`mcpvisor_gateway_requests_total{method="initialize",outcome="ok"}`:             0,
	} {
		if got, ok := samples[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	n := 0
	for s := range samples {
		if strings.HasPrefix(s, "mcpvisor_gateway_requests_total{") {
			n++
		}
	}
	if want := (len(telemetry.Methods) + 1) * int(telemetry.NumOutcomes); n != want {
		t.Errorf("%d series, want %d", n, want)
	}
}

// The HTTP requests the fronts refuse without a JSON-RPC message show as
// mcpvisor_http_refusals_total by reason: every reason of the fixed set,
// from zero, and nothing else.
func TestHTTPRefusalsExposition(t *testing.T) {
	f := testFleet(t)
	var local telemetry.Local
	local.RecordRefusal(telemetry.RefusedUnauthorized)
	local.RecordRefusal(telemetry.RefusedUnknownSession)
	local.RecordRefusal(telemetry.RefusedUnknownSession)
	srv := httptest.NewServer(New(f, nil, Options{Local: &local}))
	defer srv.Close()
	body, _ := io.ReadAll(get(t, srv.URL+"/metrics").Body)
	if !strings.Contains(string(body), "# TYPE mcpvisor_http_refusals_total counter\n") {
		t.Error("no TYPE line for mcpvisor_http_refusals_total")
	}
	samples := parseExposition(t, string(body))
	want := map[string]float64{
		`mcpvisor_http_refusals_total{reason="unauthorized"}`:        1,
		`mcpvisor_http_refusals_total{reason="forbidden"}`:           0,
		`mcpvisor_http_refusals_total{reason="method_not_allowed"}`:  0,
		`mcpvisor_http_refusals_total{reason="not_acceptable"}`:      0,
		`mcpvisor_http_refusals_total{reason="unsupported_version"}`: 0,
		`mcpvisor_http_refusals_total{reason="session_required"}`:    0,
		`mcpvisor_http_refusals_total{reason="bad_last_event_id"}`:   0,
		`mcpvisor_http_refusals_total{reason="session_not_found"}`:   2,
		`mcpvisor_http_refusals_total{reason="unknown_server"}`:      0,
	}
	n := 0
	for s, got := range samples {
		if !strings.HasPrefix(s, "mcpvisor_http_refusals_total{") {
			continue
		}
		n++
		if w, ok := want[s]; !ok || got != w {
			t.Errorf("%s = %v, want %v (listed %v)", s, got, w, ok)
		}
	}
	if n != len(want) || n != int(telemetry.NumRefusals) {
		t.Errorf("%d series, want %d", n, len(want))
	}
}

// fakeSessions is a SessionStats.
type fakeSessions struct{}

func (fakeSessions) Open() int { return 998 }
func (fakeSessions) Max() int  { return 1000 }
func (fakeSessions) EachEviction(fn func(string, uint64)) {
	fn("idle", 3)
	fn("limit", 4001)
	fn("unused", 0)
}

// The bound on client sessions shows as gauges of the places held and of
// maxSessions, and its evictions by reason, zero counts included.
func TestSessionsExposition(t *testing.T) {
	srv := httptest.NewServer(New(testFleet(t), nil, Options{Sessions: fakeSessions{}}))
	defer srv.Close()
	body, _ := io.ReadAll(get(t, srv.URL+"/metrics").Body)
	if !strings.Contains(string(body), "# TYPE mcpvisor_session_evictions_total counter\n") {
		t.Error("no TYPE line for mcpvisor_session_evictions_total")
	}
	samples := parseExposition(t, string(body))
	for series, want := range map[string]float64{
		`mcpvisor_sessions`:                                 998,
		`mcpvisor_sessions_limit`:                           1000,
		`mcpvisor_session_evictions_total{reason="idle"}`:   3,
		`mcpvisor_session_evictions_total{reason="limit"}`:  4001,
		`mcpvisor_session_evictions_total{reason="unused"}`: 0,
	} {
		if got, ok := samples[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	srv2 := httptest.NewServer(New(testFleet(t), nil, Options{}))
	defer srv2.Close()
	body, _ = io.ReadAll(get(t, srv2.URL+"/metrics").Body)
	if strings.Contains(string(body), "mcpvisor_session") {
		t.Error("session series without a session bound to report")
	}
}

// TestMetricsCountsEveryKind: every declared event kind is counted in
// /metrics from zero — about every server, or mcpvisor as a whole.
func TestMetricsCountsEveryKind(t *testing.T) {
	srv := httptest.NewServer(New(testFleet(t), NewEventLog(10), Options{}))
	defer srv.Close()
	body, _ := io.ReadAll(get(t, srv.URL+"/metrics").Body)
	samples := parseExposition(t, string(body))
	for _, k := range event.Kinds() {
		series := fmt.Sprintf(`mcpvisor_events_total{server="",type=%q}`, k)
		if k.OfServer() {
			series = fmt.Sprintf(`mcpvisor_events_total{server="a",type=%q}`, k)
		}
		if v, ok := samples[series]; !ok || v != 0 {
			t.Errorf("%s: %v, %v; want it counted from 0", series, v, ok)
		}
	}
}

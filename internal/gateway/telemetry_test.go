package gateway

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
	"github.com/mcpvisor/mcpvisor/internal/telemetry/otlptest"
)

// newTestTracing is tracing to an in-process OTLP receiver, ignoring the
// environment.
func newTestTracing(t *testing.T) (*telemetry.Tracing, *otlptest.Receiver) {
	t.Helper()
	rcv := otlptest.New(t)
	tr, err := telemetry.NewTracing(t.Context(), telemetry.TracingOptions{Endpoint: rcv.URL, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, rcv
}

// opsOf indexes a server's duration series by method|tool|error type.
func opsOf(tel *telemetry.Server) map[string]telemetry.HistogramSnapshot {
	m := map[string]telemetry.HistogramSnapshot{}
	for _, o := range tel.Ops() {
		m[o.Method+"|"+o.Tool+"|"+o.ErrorType] = o.Hist
	}
	return m
}

// A known sequence of calls — successes, an isError result, a JSON-RPC
// error, a timeout, a cancellation, a stopped server — is counted once
// each, by outcome and in the duration histogram by tool and error type;
// each gets one span, with its outcome, parented on the trace context the
// client sent in _meta, whose own context the server receives in its
// _meta.
func TestCallMetricsAndSpans(t *testing.T) {
	tr, rcv := newTestTracing(t)
	w := newWorld(t, `{"a":{"command":"$FIXTURE","requestTimeout":"300ms"}}`)
	w.gw.SetTracing(tr)
	ep := w.gw.Single("a")
	out := newRecorder()
	s := ep.Open(out)
	defer ep.Close(s)
	var n atomic.Int64
	call := func(ctx context.Context, method, params string) *rpc.Message {
		id := json.RawMessage(strconv.FormatInt(n.Add(1), 10))
		return ep.Handle(ctx, s, &rpc.Message{ID: id, Method: method, Params: json.RawMessage(params)}, out)
	}
	if m := call(t.Context(), "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`); m.Error != nil {
		t.Fatal(m.Error.Message)
	}
	n.Store(0) // initialize is answered by mcpvisor: no call of the server's
	// Its tools are labels once their list is known (serve learns every
	// server's at start; the aggregated endpoint learns it to list).
	if _, err := w.fleet.Get("a").Catalog().List(t.Context(), catalog.Tools); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		if m := call(t.Context(), "tools/call", `{"name":"echo","arguments":{"text":"hi"}}`); m.Error != nil {
			t.Fatalf("echo: %s", m.Encode())
		}
	}
	if m := call(t.Context(), "tools/call", `{"name":"echo","arguments":{"text":5}}`); m.Error != nil || !strings.Contains(string(m.Result), `"isError":true`) {
		t.Fatalf("echo with a bad argument: %s", m.Encode())
	}
	if m := call(t.Context(), "tools/call", `{"name":"sleep","arguments":{"ms":30000}}`); m.Error == nil || m.Error.Code != rpc.RequestTimeout {
		t.Fatalf("sleep past the timeout: %s", m.Encode())
	}
	if m := call(t.Context(), "tools/call", `{"name":"nope"}`); m.Error == nil || m.Error.Code != rpc.InvalidParams {
		t.Fatalf("unknown tool: %s", m.Encode())
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan *rpc.Message, 1)
	go func() { done <- call(ctx, "tools/call", `{"name":"sleep","arguments":{"ms":30000}}`) }()
	waitFor(t, "the sleep in flight", func() bool { return inFlight(w.gw) == 1 })
	cancel()
	if m := <-done; m.Error == nil {
		t.Fatalf("cancelled sleep: %s", m.Encode())
	}
	if m := call(t.Context(), "tools/list", `{}`); m.Error != nil {
		t.Fatalf("tools/list: %s", m.Encode())
	}
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	m := call(t.Context(), "tools/call", `{"name":"meta","_meta":{"traceparent":"00-`+clientTrace+`-`+clientSpan+`-01","other":1}}`)
	if m.Error != nil {
		t.Fatalf("meta: %s", m.Encode())
	}
	var res struct{ Content []struct{ Text string } }
	_ = json.Unmarshal(m.Result, &res)
	var seen map[string]any
	if len(res.Content) != 1 || json.Unmarshal([]byte(res.Content[0].Text), &seen) != nil {
		t.Fatalf("meta result %s", m.Result)
	}
	tp, _ := seen["traceparent"].(string)
	if !strings.HasPrefix(tp, "00-"+clientTrace+"-") || strings.Contains(tp, clientSpan) || seen["other"] != 1.0 {
		t.Fatalf("the server's _meta %v: want the client's trace, mcpvisor's span, the other members", seen)
	}
	srv := w.fleet.Get("a")
	if _, err := srv.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if m := call(t.Context(), "tools/call", `{"name":"echo","arguments":{"text":"hi"}}`); m.Error == nil {
		t.Fatalf("a call to a stopped server: %s", m.Encode())
	}

	tel := srv.Telemetry()
	if got, want := tel.CallCounts(), (telemetry.CallCounts{OK: 4, ToolError: 1, ProtocolError: 1, Timeout: 1, Cancelled: 1, Unavailable: 1}); got != want {
		t.Errorf("calls %+v, want %+v", got, want)
	}
	if st := srv.Status(); st.Calls != tel.CallCounts() {
		t.Errorf("status calls %+v", st.Calls)
	}
	ops := opsOf(tel)
	want := map[string]uint64{
		"tools/call|echo|": 2, "tools/call|echo|tool_error": 1, "tools/call|sleep|timeout": 1,
		"tools/call|sleep|cancelled": 1, "tools/call|_OTHER|-32602": 1, "tools/list||": 1,
		"tools/call|meta|": 1, "tools/call|echo|unavailable": 1,
	}
	for k, c := range want {
		if ops[k].Count != c {
			t.Errorf("%s: %d, want %d", k, ops[k].Count, c)
		}
	}
	if len(ops) != len(want) {
		t.Errorf("%d series, want %d: %v", len(ops), len(want), ops)
	}
	if h := ops["tools/call|sleep|timeout"]; h.Cumulative[4] != 0 || h.Sum < 0.3 { // le 0.2
		t.Errorf("the timed-out call's duration: %+v, want at least the 300 ms timeout", h)
	}
	if sent, received := tel.Bytes(); sent == 0 || received == 0 {
		t.Errorf("bytes relayed %d/%d", sent, received)
	}

	// One span per call, no more; and one of initialize, which mcpvisor
	// answered itself.
	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	all := rcv.Wait(int(n.Load())+1, 5*time.Second)
	var spans []otlptest.Span
	for _, sp := range all {
		if sp.Attrs["mcpvisor.local"] == true {
			if sp.Name != "initialize" {
				t.Errorf("a span of mcpvisor's own answer: %+v", sp)
			}
			continue
		}
		spans = append(spans, sp)
	}
	if len(spans) != int(n.Load()) || len(all) != len(spans)+1 {
		t.Fatalf("%d spans (%d of calls) for %d calls and initialize", len(all), len(spans), n.Load())
	}
	outcomes := map[string]int{}
	for _, sp := range spans {
		outcomes[sp.Attrs["mcpvisor.outcome"].(string)]++
		if sp.Attrs["mcpvisor.server"] != "a" || sp.Kind != 2 || (sp.Attrs["mcpvisor.outcome"] != "ok") != (sp.StatusCode == 2) {
			t.Errorf("span %+v", sp)
		}
		if sp.Name == "tools/call meta" {
			if sp.TraceID != clientTrace || sp.ParentSpanID != clientSpan || tp != "00-"+sp.TraceID+"-"+sp.SpanID+"-01" {
				t.Errorf("meta span %s/%s parent %s; the server got %s", sp.TraceID, sp.SpanID, sp.ParentSpanID, tp)
			}
			if sp.Attrs["mcp.protocol.version"] != "2025-11-25" || sp.Attrs["gen_ai.tool.name"] != "meta" {
				t.Errorf("meta span attributes %v", sp.Attrs)
			}
		}
	}
	if want := map[string]int{"ok": 4, "tool_error": 1, "protocol_error": 1, "timeout": 1, "cancelled": 1, "unavailable": 1}; !equalCounts(outcomes, want) {
		t.Errorf("span outcomes %v, want %v", outcomes, want)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A modern client's call held across input_required rounds is one call
// of its server's: counted once, when its final answer comes, however many
// rounds it took (each retry is a request mcpvisor answers); so is a modern request that a dormant server must wake for,
// whose span says how long the wake took.
func TestHeldCallCountedOnce(t *testing.T) {
	tr, rcv := newTestTracing(t)
	w := newMRTRWorld(t)
	w.gw.SetTracing(tr)
	key, _, state := inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	_, _, state2 := inputRequired(t, w.call("2", `,"requestState":`+mustJSONString(state), `{"elicitation":{}}`))
	tel := w.fleet.Get("c").Telemetry()
	if c := tel.CallCounts(); c != (telemetry.CallCounts{}) {
		t.Fatalf("a held call counted before its end: %+v", c)
	}
	m := w.call("3", `,"requestState":`+mustJSONString(state2)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`, `{"elicitation":{}}`)
	if m.Error != nil {
		t.Fatal(m.Encode())
	}
	if c := tel.CallCounts(); c != (telemetry.CallCounts{OK: 1}) {
		t.Fatalf("held call of three rounds: %+v, want one ok", c)
	}
	if ops := opsOf(tel); ops["tools/call|test_elicitation|"].Count != 1 {
		t.Fatalf("series %v", ops)
	}
	// Its two retries are answered by mcpvisor from the call it holds:
	// counted and traced as mcpvisor's own answers.
	if n := w.gw.LocalRequests().Count("tools/call", telemetry.OK); n != 2 {
		t.Fatalf("%d retries counted as mcpvisor's answers, want 2", n)
	}
	_ = tr.Flush(t.Context())
	spans := rcv.Wait(3, 5*time.Second)
	calls := 0
	for _, sp := range spans {
		if sp.Attrs["mcpvisor.local"] != true {
			calls++
			if sp.Name != "tools/call test_elicitation" {
				t.Errorf("call span %q", sp.Name)
			}
		}
	}
	if len(spans) != 3 || calls != 1 {
		t.Fatalf("spans %+v, want one for the held call and one per retry", spans)
	}
}

// A request to a dormant server wakes it: the wake is timed in the
// server's wake histogram and in the request's span.
func TestWakeTimed(t *testing.T) {
	tr, rcv := newTestTracing(t)
	w := newWorld(t, `{"a":{"command":"$FIXTURE","idleTimeout":"100ms","startGrace":"0s"}}`)
	w.gw.SetTracing(tr)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	hs := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); hs.Close() })
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"x"},` + modernMeta(`{}`) + `}}`
	postModern(t, hs.URL, body, "tools/call", "a__echo") // started (not woken)
	w.waitEvent("a", "dormant", 1, 5*time.Second)
	if _, b := postModern(t, hs.URL, body, "tools/call", "a__echo"); !strings.Contains(string(b), `"x"`) {
		t.Fatalf("call after the sleep: %s", b)
	}
	tel := w.fleet.Get("a").Telemetry()
	if wk, sp := tel.Wakes(), tel.Spawns(); wk.Count != 1 || sp.Count != 2 || wk.Sum <= 0 {
		t.Fatalf("wakes %+v, spawns %+v: want one wake of two spawns", wk, sp)
	}
	_ = tr.Flush(t.Context())
	spans := rcv.Wait(2, 5*time.Second)
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	if _, ok := spans[0].Attrs["mcpvisor.wake_ms"]; ok {
		t.Errorf("the first call (a start, not a wake) has a wake time: %v", spans[0].Attrs)
	}
	if ms, _ := spans[1].Attrs["mcpvisor.wake_ms"].(float64); ms <= 0 || spans[1].Attrs["mcp.protocol.version"] != "2026-07-28" {
		t.Errorf("the call that woke the server: %v", spans[1].Attrs)
	}
}

// A call in flight when a reload removes its server, and that outlives
// the drain (its progress keeps its own timeout from running out, the
// drain's bound does not move), is cut by the drain: it ends once, as
// unavailable.
func TestCallCutByDrainCountedOnce(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"},"b":{"command":"$FIXTURE","requestTimeout":"500ms"}}`)
	ep := w.gw.Single("b")
	out := newRecorder()
	s := ep.Open(out)
	defer ep.Close(s)
	srv := w.fleet.Get("b")
	done := make(chan *rpc.Message, 1)
	go func() {
		done <- ep.Handle(t.Context(), s, &rpc.Message{ID: json.RawMessage(`1`), Method: "tools/call",
			Params: json.RawMessage(`{"name":"progress","arguments":{"steps":100000,"intervalMs":50},"_meta":{"progressToken":"p"}}`)}, out)
	}()
	waitFor(t, "the call in flight", func() bool { return inFlight(w.gw) == 1 })
	w.reloadTo(t, `{"a":{"command":"$FIXTURE"}}`)
	var m *rpc.Message
	select {
	case m = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the drain did not cut the call")
	}
	c := srv.Telemetry().CallCounts()
	if c != (telemetry.CallCounts{Unavailable: 1}) || m.Error == nil {
		t.Fatalf("answer %s, counted %+v: want one unavailable", m.Encode(), c)
	}
}

// A client cannot make span names of its own: the name of a tool the
// server does not list, and a method outside MCP's, stay out of them
// (names are what trace backends index and derive metrics from), and no
// attribute or status of a span carries more than a bounded part of what
// the client sent.
func TestSpanNamesBounded(t *testing.T) {
	tr, rcv := newTestTracing(t)
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	w.gw.SetTracing(tr)
	if _, err := w.fleet.Get("a").Catalog().List(t.Context(), catalog.Tools); err != nil {
		t.Fatal(err)
	}
	ep := w.gw.Single("a")
	out := newRecorder()
	s := ep.Open(out)
	defer ep.Close(s)
	long := strings.Repeat("z", 10000)
	for i, m := range []*rpc.Message{
		{Method: "initialize", Params: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`)},
		{Method: "tools/call", Params: json.RawMessage(`{"name":"echo","arguments":{"text":"hi"}}`)},
		{Method: "tools/call", Params: json.RawMessage(`{"name":"` + long + `"}`)},
		{Method: "x/" + long, Params: json.RawMessage(`{}`)},
	} {
		m.ID = json.RawMessage(strconv.Itoa(i + 1))
		ep.Handle(t.Context(), s, m, out)
	}
	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, sp := range rcv.Wait(3, 5*time.Second) {
		names[sp.Name] = true
		for k, v := range sp.Attrs {
			if s, ok := v.(string); ok && len(s) > 1024 {
				t.Errorf("span %.40q: attribute %s of %d bytes", sp.Name, k, len(s))
			}
		}
		if len(sp.StatusMessage) > 1024 {
			t.Errorf("span %.40q: status message of %d bytes", sp.Name, len(sp.StatusMessage))
		}
	}
	for n := range names {
		if len(n) > 64 {
			t.Errorf("span name of %d bytes: %.60q…", len(n), n)
		}
	}
	for _, want := range []string{"tools/call echo", "tools/call", telemetry.Other} {
		if !names[want] {
			t.Errorf("no span named %q among %d", want, len(names))
		}
	}
}

// The requests mcpvisor answers itself — the handshake, ping, the
// aggregated endpoint's lists, server/discover, a call of an unknown or
// denied tool, logging/setLevel on /mcp, a method it does not serve — are
// counted by method (folded to MCP's) and outcome, each once, and each
// gets a span; the requests forwarded to a server are not counted there
// (their server counts them) and get the one span they had.
func TestLocalAnswersCounted(t *testing.T) {
	tr, rcv := newTestTracing(t)
	w := newWorld(t, `{"a":{"command":"$FIXTURE","tools":{"deny":["crash"]}}}`)
	w.gw.SetTracing(tr)
	ep := w.gw.Aggregate()
	out := newRecorder()
	s := ep.Open(out)
	defer ep.Close(s)
	n := 0
	call := func(method, params string) *rpc.Message {
		n++
		return ep.Handle(t.Context(), s, &rpc.Message{ID: json.RawMessage(strconv.Itoa(n)), Method: method, Params: json.RawMessage(params)}, out)
	}
	call("initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`)
	call("ping", `{}`)
	call("tools/list", `{}`)
	call("prompts/list", `{}`)
	if m := call("tools/call", `{"name":"a__crash"}`); m.Error == nil {
		t.Fatalf("a denied tool: %s", m.Encode())
	}
	call("tools/call", `{"name":"nope"}`)
	call("logging/setLevel", `{"level":"info"}`)
	call("x/"+strings.Repeat("y", 200), `{}`)
	if m := call("tools/call", `{"name":"a__echo","arguments":{"text":"hi"}}`); m.Error != nil {
		t.Fatalf("echo: %s", m.Encode())
	}
	meta := `{` + modernMeta(`{}`) + `}`
	ep.Stateless(t.Context(), &rpc.Message{ID: json.RawMessage(`"d"`), Method: "server/discover", Params: json.RawMessage(meta)}, mustModern(t, meta), out)
	ep.Stateless(t.Context(), &rpc.Message{ID: json.RawMessage(`"p"`), Method: "ping", Params: json.RawMessage(meta)}, mustModern(t, meta), out)

	// Over HTTP: a session's ping, and a call that reaches its server.
	h := NewStreamableHandler(ep, HTTPOptions{})
	hs := httptest.NewServer(h)
	defer func() { h.Close(); hs.Close() }()
	hc := &httpTestServer{t: t, h: h, srv: hs, url: hs.URL}
	sid := hc.initialize()
	hdr := map[string]string{"Mcp-Protocol-Version": "2025-11-25"}
	for _, body := range []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"hi"}}}`} {
		if st := hc.status("POST", sid, body, hdr); st != 200 {
			t.Fatalf("%s: %d", body, st)
		}
	}

	local := w.gw.LocalRequests()
	want := map[string]map[telemetry.Outcome]uint64{
		"initialize":       {telemetry.OK: 2},
		"ping":             {telemetry.OK: 2, telemetry.ProtocolError: 1},
		"tools/list":       {telemetry.OK: 1},
		"prompts/list":     {telemetry.OK: 1},
		"tools/call":       {telemetry.ProtocolError: 2},
		"logging/setLevel": {telemetry.OK: 1},
		"server/discover":  {telemetry.OK: 1},
		telemetry.Other:    {telemetry.ProtocolError: 1},
	}
	total := uint64(0)
	local.Each(func(method string, o telemetry.Outcome, got uint64) {
		total += got
		if got != want[method][o] {
			t.Errorf("%s %s: %d, want %d", method, o, got, want[method][o])
		}
	})
	if total != 12 {
		t.Errorf("%d requests answered locally, want 12", total)
	}
	if c := w.fleet.Get("a").Telemetry().CallCounts(); c != (telemetry.CallCounts{OK: 2}) {
		t.Errorf("server a's calls %+v, want the two echoes", c)
	}

	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Wait(14, 5*time.Second)
	names := map[string]int{}
	for _, sp := range spans {
		names[sp.Name]++
		if local, _ := sp.Attrs["mcpvisor.local"].(bool); local != (sp.Name != "tools/call echo") {
			t.Errorf("span %q: mcpvisor.local %v", sp.Name, sp.Attrs["mcpvisor.local"])
		}
	}
	if len(spans) != 14 || names["tools/call echo"] != 2 || names["initialize"] != 2 || names["ping"] != 3 || names[telemetry.Other] != 1 || names["server/discover"] != 1 {
		t.Errorf("%d spans: %v", len(spans), names)
	}
}

func mustModern(t *testing.T, params string) *Modern {
	t.Helper()
	mo, bad := readModern(&rpc.Message{ID: json.RawMessage(`1`), Method: "ping", Params: json.RawMessage(params)})
	if bad != nil {
		t.Fatal(bad.Encode())
	}
	return mo
}

// A held call whose client never comes back is cancelled at its server
// when the hold runs out, and counted once, as cancelled; the request that
// began it was forwarded (not one of mcpvisor's own answers).
func TestExpiredHeldCallCountedOnce(t *testing.T) {
	w := newMRTRWorld(t)
	w.gw.SetHoldTimeout(200 * time.Millisecond)
	inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	tel := w.fleet.Get("c").Telemetry()
	waitFor(t, "the held call's end", func() bool { return w.gw.HeldCalls() == 0 && tel.Calls() != [telemetry.NumOutcomes]uint64{} })
	if c := tel.CallCounts(); c != (telemetry.CallCounts{Cancelled: 1}) {
		t.Fatalf("an expired held call counted %+v, want one cancelled", c)
	}
	if n := w.gw.LocalRequests().Count("tools/call", telemetry.OK); n != 0 {
		t.Fatalf("the call's first request counted as mcpvisor's answer (%d)", n)
	}
}

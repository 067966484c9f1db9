package telemetry

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry/otlptest"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Tracing is off without an endpoint, and when the environment turns it
// off; a bad endpoint or OTEL_* value is an error naming it.
func TestNewTracingConfig(t *testing.T) {
	ctx := t.Context()
	for name, env := range map[string]map[string]string{
		"nothing":      {},
		"sdk disabled": {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		"exporter off": {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
	} {
		tr, err := NewTracing(ctx, TracingOptions{Getenv: envOf(env)})
		if tr != nil || err != nil {
			t.Errorf("%s: tracing %v, err %v; want off", name, tr, err)
		}
	}
	for _, c := range []struct {
		flag string
		env  map[string]string
		want string
	}{
		{"ftp://host:1", nil, "--otlp-endpoint"},
		{"http://", nil, "--otlp-endpoint"},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}, "OTLP endpoint"},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
		{"h:1", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "soon"}, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"},
		{"h:1", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"h:1", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, "OTEL_EXPORTER_OTLP_COMPRESSION"},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:1", "OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{"h:1", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"}, "OTEL_EXPORTER_OTLP_CERTIFICATE"},
	} {
		tr, err := NewTracing(ctx, TracingOptions{Endpoint: c.flag, Getenv: envOf(c.env)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("flag %q env %v: tracing %v, err %v; want an error naming %s", c.flag, c.env, tr, err, c.want)
		}
	}
	for flag, want := range map[string]string{
		"127.0.0.1:4318":             "http://127.0.0.1:4318/v1/traces",
		"https://collector/":         "https://collector/v1/traces",
		"http://127.0.0.1:4318/v1/x": "http://127.0.0.1:4318/v1/x",
	} {
		tr, err := NewTracing(ctx, TracingOptions{Endpoint: flag, Getenv: envOf(nil)})
		if err != nil || tr.Endpoint() != want {
			t.Errorf("flag %q: endpoint %q, err %v; want %s", flag, tr.Endpoint(), err, want)
		}
		_ = tr.Shutdown(ctx)
	}
	tr, err := NewTracing(ctx, TracingOptions{Getenv: envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"})})
	if err != nil || tr.Endpoint() != "http://c:4318/v1/traces" {
		t.Errorf("base endpoint from the environment: %q, %v", tr.Endpoint(), err)
	}
	_ = tr.Shutdown(ctx)
}

const clientTP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// A request's span is the child of the trace context in its _meta, links
// the one of its HTTP headers, goes into the _meta the server gets (other
// _meta members kept), and reaches the OTLP receiver with the request's
// attributes, the environment's headers and service name, gzipped.
func TestTracingSpanPropagationAndExport(t *testing.T) {
	rcv := otlptest.New(t)
	tr, err := NewTracing(t.Context(), TracingOptions{Endpoint: rcv.URL, Version: "1.2.3", Getenv: envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS":     "x-api-key=abc%20d",
		"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
		"OTEL_SERVICE_NAME":              "gateway-under-test",
	})})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())

	// The HTTP request's own trace context, as Handler puts it.
	var ambient trace.SpanContext
	h := tr.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { ambient = trace.SpanContextFromContext(r.Context()) }))
	req := httptest.NewRequest("POST", "/mcp", nil)
	req.Header.Set("traceparent", "00-11111111111111111111111111111111-2222222222222222-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if !ambient.IsValid() || ambient.TraceID().String() != "11111111111111111111111111111111" {
		t.Fatalf("Handler: context %v", ambient)
	}
	ctx := trace.ContextWithRemoteSpanContext(t.Context(), ambient)

	params := json.RawMessage(`{"name":"echo","arguments":{"text":"x"},"_meta":{"progressToken":7,"traceparent":"` + clientTP + `","tracestate":"k=v"}}`)
	sp := tr.Start(ctx, "tools/call", "echo", params)
	out := sp.Inject(params)
	meta := rpc.Member(out, "_meta")
	tp, _ := rpc.StringMember(meta, "traceparent")
	ts, _ := rpc.StringMember(meta, "tracestate")
	if string(rpc.Member(meta, "progressToken")) != "7" || string(rpc.Member(out, "arguments")) != `{"text":"x"}` {
		t.Fatalf("injected params lost members: %s", out)
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
	if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || sc.SpanID().String() == "b7ad6b7169203331" || ts != "k=v" {
		t.Fatalf("the server gets traceparent %q tracestate %q: want the client's trace, a span of mcpvisor's", tp, ts)
	}
	sp.End(End{Server: "a", Tool: "echo", Outcome: Timeout, Message: "server a did not answer", Wake: 1500 * time.Microsecond,
		Protocol: "2025-11-25", SessionID: "sid", RequestID: json.RawMessage(`"r1"`)})

	// A request without trace context of its own: a child of its HTTP
	// request's; a protocol error carries its code.
	sp2 := tr.Start(ctx, "resources/read", "", json.RawMessage(`{"uri":"x"}`))
	sp2.End(End{Server: "a", Outcome: ProtocolError, Code: -32602, Message: "bad", RequestID: json.RawMessage(`2`)})

	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Wait(2, 5*time.Second)
	if len(spans) != 2 {
		t.Fatalf("%d spans received, want 2", len(spans))
	}
	s := spans[0]
	if s.Name != "tools/call echo" || s.Kind != 2 || s.TraceID != "0af7651916cd43dd8448eb211c80319c" || s.ParentSpanID != "b7ad6b7169203331" || s.SpanID != sc.SpanID().String() {
		t.Fatalf("span %+v", s)
	}
	wantAttrs := map[string]any{
		"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo", "gen_ai.operation.name": "execute_tool",
		"mcpvisor.server": "a", "mcpvisor.outcome": "timeout", "error.type": "timeout", "mcpvisor.wake_ms": 1.5,
		"mcp.protocol.version": "2025-11-25", "mcp.session.id": "sid", "jsonrpc.request.id": "r1",
	}
	for k, v := range wantAttrs {
		if s.Attrs[k] != v {
			t.Errorf("attribute %s = %v, want %v", k, s.Attrs[k], v)
		}
	}
	if s.StatusCode != 2 || s.StatusMessage != "server a did not answer" {
		t.Errorf("status %d %q", s.StatusCode, s.StatusMessage)
	}
	if len(s.Links) != 1 || s.Links[0] != "11111111111111111111111111111111-2222222222222222" {
		t.Errorf("links %v, want the HTTP request's context", s.Links)
	}
	if s.Resource["service.name"] != "gateway-under-test" || s.Scope != "github.com/mcpvisor/mcpvisor" {
		t.Errorf("resource %v scope %q", s.Resource, s.Scope)
	}
	s2 := spans[1]
	if s2.Name != "resources/read" || s2.TraceID != "11111111111111111111111111111111" || s2.ParentSpanID != "2222222222222222" ||
		s2.Attrs["error.type"] != "-32602" || s2.Attrs["rpc.response.status_code"] != "-32602" || s2.Attrs["jsonrpc.request.id"] != "2" {
		t.Errorf("second span %+v", s2)
	}
	if _, ok := s2.Attrs["gen_ai.tool.name"]; ok {
		t.Errorf("a resources/read span names a tool: %v", s2.Attrs)
	}
	for _, hdr := range rcv.Headers() {
		if hdr.Get("x-api-key") != "abc d" || hdr.Get("Content-Encoding") != "gzip" {
			t.Errorf("export headers %v", hdr)
		}
	}
}

// Inject puts the trace context in params that have no _meta, or are
// empty, and leaves alone params that are no object and a _meta that is
// none; a zero Span (tracing off) changes nothing.
func TestInjectShapes(t *testing.T) {
	rcv := otlptest.New(t)
	tr, err := NewTracing(t.Context(), TracingOptions{Endpoint: rcv.URL, Getenv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	sp := tr.Start(t.Context(), "ping", "", nil)
	defer sp.End(End{})
	for in, want := range map[string]string{
		``:                  `{"_meta":{"traceparent":`,
		`{}`:                `{"_meta":{"traceparent":`,
		`{"a":1}`:           `{"_meta":{"traceparent":`,
		`[1]`:               `[1]`,
		`{"_meta":"x"}`:     `{"_meta":"x"}`,
		`{"_meta":{"k":1}}`: `{"_meta":{"traceparent":`,
	} {
		out := string(sp.Inject(json.RawMessage(in)))
		if !strings.HasPrefix(out, want) {
			t.Errorf("Inject(%s) = %s, want %s…", in, out, want)
		}
		if strings.HasPrefix(want, `{"_meta"`) && !json.Valid([]byte(out)) {
			t.Errorf("Inject(%s) = %s: not JSON", in, out)
		}
	}
	var zero Span
	if out := zero.Inject(json.RawMessage(`{"a":1}`)); string(out) != `{"a":1}` {
		t.Errorf("zero Span injected: %s", out)
	}
	var off *Tracing
	if sp := off.Start(t.Context(), "tools/call", "x", nil); sp.span != nil {
		t.Error("a nil Tracing started a span")
	}
}

// Shutdown is bounded by its context: a receiver that never answers
// costs no more, and the spans it did not take are reported.
func TestShutdownBounded(t *testing.T) {
	release := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer stuck.Close()
	defer close(release)
	tr, err := NewTracing(t.Context(), TracingOptions{Endpoint: stuck.URL, Getenv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	tr.Start(t.Context(), "tools/call", "x", nil).End(End{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if err := tr.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown against a receiver that never answers reported nothing lost")
	}
	// Within ctx, not the exporter's own 10 s client timeout (a generous
	// margin over the 200 ms deadline: no wall-clock tuning here).
	if took := time.Since(t0); took > 5*time.Second {
		t.Fatalf("Shutdown took %v under a 200 ms deadline", took)
	}
	// Idempotent: a second Shutdown returns at once and exports nothing.
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatalf("a second Shutdown: %v", err)
	}
}

// Tracing is safe for concurrent use: spans started, injected and ended
// from many goroutines at once all arrive, each once (run with -race).
func TestTracingConcurrent(t *testing.T) {
	rcv := otlptest.New(t)
	tr, err := NewTracing(t.Context(), TracingOptions{Endpoint: rcv.URL, Getenv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				sp := tr.Start(t.Context(), "tools/call", "echo", json.RawMessage(`{"name":"echo"}`))
				_ = sp.Inject(json.RawMessage(`{"name":"echo"}`))
				sp.End(End{Server: "a", Outcome: Outcome((w + i) % int(NumOutcomes))})
			}
		})
	}
	wg.Wait()
	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Wait(workers*each, 5*time.Second)
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	if len(spans) != workers*each || len(ids) != workers*each {
		t.Fatalf("%d spans, %d distinct, want %d", len(spans), len(ids), workers*each)
	}
}

// Ending spans never waits on the export: with a receiver that takes
// nothing, far more spans than the export queue holds all end at once
// (those beyond the queue are dropped), within a bound no blocked export
// could meet.
func TestEndNeverWaitsForExport(t *testing.T) {
	release := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer stuck.Close()
	defer close(release)
	tr, err := NewTracing(t.Context(), TracingOptions{Endpoint: stuck.URL, Getenv: envOf(nil), BatchTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = tr.Shutdown(ctx)
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20000 { // ten times the SDK's default queue
			tr.Start(context.Background(), "tools/call", "x", nil).End(End{Server: "a"})
			tr.Answered(context.Background(), time.Now(), "ping", nil, End{})
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("ending spans waited for an export that does not finish")
	}
}

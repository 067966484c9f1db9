// Package otlptest is an in-process OTLP/HTTP trace receiver for tests: it
// decodes each ExportTraceServiceRequest with the OpenTelemetry protocol's
// own generated types and keeps the spans.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Name                          string
	TraceID, SpanID, ParentSpanID string // hex
	TraceState                    string
	Kind                          int // OTLP SpanKind: 2 is SERVER
	Flags                         uint32
	Attrs                         map[string]any
	Resource                      map[string]any
	Scope                         string
	StatusCode                    int // 0 unset, 1 ok, 2 error
	StatusMessage                 string
	Links                         []string // trace-span, hex
	Start, End                    time.Time
}

// Receiver is the receiver: POST its URL (…/v1/traces).
type Receiver struct {
	URL string

	mu       sync.Mutex
	spans    []Span
	requests int
	headers  []http.Header
	changed  chan struct{}
}

// New starts a receiver on 127.0.0.1, closed with t.
func New(t testing.TB) *Receiver {
	r := &Receiver{changed: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/v1/traces"
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces, application/x-protobuf", http.StatusBadRequest)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, "not an ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range msg.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{
					Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentSpanID: hex.EncodeToString(s.ParentSpanId), TraceState: s.TraceState, Kind: int(s.Kind), Flags: s.Flags,
					Attrs: attrs(s.Attributes), Resource: res, Scope: ss.GetScope().GetName(),
					StatusCode: int(s.GetStatus().GetCode()), StatusMessage: s.GetStatus().GetMessage(),
					Start: time.Unix(0, int64(s.StartTimeUnixNano)), End: time.Unix(0, int64(s.EndTimeUnixNano)),
				}
				for _, l := range s.Links {
					sp.Links = append(sp.Links, hex.EncodeToString(l.TraceId)+"-"+hex.EncodeToString(l.SpanId))
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.requests++
	r.headers = append(r.headers, req.Header.Clone())
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		m[kv.Key] = value(kv.Value)
	}
	return m
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.Values {
			out = append(out, value(e))
		}
		return out
	}
	return nil
}

// Spans is every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Headers is the headers of each export request received so far.
func (r *Receiver) Headers() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

// Wait waits, up to timeout, until at least n spans have come, and
// returns every span received (fewer than n when the time ran out).
func (r *Receiver) Wait(n int, timeout time.Duration) []Span {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		r.mu.Lock()
		got, changed := len(r.spans), r.changed
		r.mu.Unlock()
		if got >= n {
			return r.Spans()
		}
		select {
		case <-changed:
		case <-t.C:
			return r.Spans()
		}
	}
}

package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// TracingOptions configure NewTracing.
type TracingOptions struct {
	// Endpoint is the --otlp-endpoint flag: the base URL of an OTLP/HTTP
	// receiver (http://host:4318; "host:port" means http://host:port),
	// to which /v1/traces is added when it has no path of its own. ""
	// leaves it to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT; without any, tracing is off.
	Endpoint string
	// Version is mcpvisor's version, the service.version of its spans.
	Version string
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
	// BatchTimeout is how long a span may wait to be exported with
	// others (0: the SDK's default, OTEL_BSP_SCHEDULE_DELAY or 5 s).
	BatchTimeout time.Duration
}

// Tracing makes a span of each client request — one that reaches a
// server (Start), or one mcpvisor answers itself (Answered) — and
// exports the spans over OTLP/HTTP (protobuf), in batches (the SDK's batch
// span processor: a bounded queue, spans beyond it dropped). A nil *Tracing is tracing
// turned off: the gateway then makes no span and changes no request. Safe
// for concurrent use.
type Tracing struct {
	tp       *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TraceContext
	endpoint string
}

// NewTracing returns the tracing opts ask for, or nil (and no error) when
// they ask for none: no --otlp-endpoint, no OTLP endpoint in the
// environment, OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. The
// environment's other OTEL_* settings apply as the OpenTelemetry SDK reads
// them: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (the service name
// is "mcpvisor" otherwise), OTEL_TRACES_SAMPLER and its argument (parent
// based, always on, otherwise), and OTEL_EXPORTER_OTLP_HEADERS,
// _TIMEOUT, _COMPRESSION, _CERTIFICATE and _PROTOCOL (http/protobuf
// only), with their _TRACES_ variants. Nothing is sent before the first
// span.
func NewTracing(ctx context.Context, opts TracingOptions) (*Tracing, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	flagURL := ""
	if opts.Endpoint != "" {
		u, err := endpointURL(opts.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("--otlp-endpoint: %w", err)
		}
		flagURL = u
	} else {
		if getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
			return nil, nil
		}
		switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
		case "", "otlp":
		case "none":
			return nil, nil
		default:
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: mcpvisor exports traces over OTLP only (otlp, or none to turn tracing off)", exp)
		}
	}
	exp, err := otlpConfig(flagURL, getenv)
	if err != nil {
		return nil, err
	}
	version := opts.Version
	if version == "" {
		version = "unknown"
	}
	// The service name is mcpvisor's unless the environment names one.
	attrs := []attribute.KeyValue{attribute.String("service.name", "mcpvisor"), attribute.String("service.version", version)}
	if v := strings.TrimSpace(getenv("OTEL_RESOURCE_ATTRIBUTES")); v != "" {
		for kv := range strings.SplitSeq(v, ",") {
			k, val, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %q is not key=value", kv)
			}
			if dec, err := url.PathUnescape(strings.TrimSpace(val)); err == nil {
				val = dec
			}
			attrs = append(attrs, attribute.String(k, val))
		}
	}
	if v := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); v != "" {
		attrs = append(attrs, attribute.String("service.name", v))
	}
	// (Of attributes with the same key, the last wins.)
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	var bo []sdktrace.BatchSpanProcessorOption
	if opts.BatchTimeout > 0 {
		bo = append(bo, sdktrace.WithBatchTimeout(opts.BatchTimeout))
	}
	limits := sdktrace.NewSpanLimits()
	if getenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT") == "" && getenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT") == "" {
		// Attributes carry what clients send (a tool's name, a request
		// id): bounded, so that no client makes spans that a receiver
		// refuses with the batch they are in.
		limits.AttributeValueLengthLimit = MaxAttributeLength
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, bo...), sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(limits))
	return &Tracing{tp: tp, tracer: tp.Tracer("github.com/mcpvisor/mcpvisor", trace.WithInstrumentationVersion(version)), endpoint: exp.url}, nil
}

// MaxAttributeLength bounds the length of a span's string attributes
// (longer ones are cut) and of its status message, unless
// OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT or
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT sets another bound for attributes.
const MaxAttributeLength = 1024

// endpointURL is the traces URL of the --otlp-endpoint value s.
func endpointURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: the scheme must be http or https", s)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q has no host", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// Endpoint is where spans go (as configured: the flag's URL, or the
// environment's endpoint).
func (t *Tracing) Endpoint() string {
	if t == nil {
		return ""
	}
	return t.endpoint
}

// Flush exports the spans ended so far, within ctx.
func (t *Tracing) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown exports what is left and stops the exporter, within ctx: an
// endpoint that does not answer costs no more than ctx allows. Spans
// ended later are dropped. Idempotent.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	err := t.tp.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("spans left unexported: %w", err)
	}
	return err
}

// Handler wraps an MCP HTTP handler: a request's W3C trace context
// (traceparent and tracestate headers) becomes its context's remote span,
// the parent of the spans of the client requests it carries whose _meta
// has no trace context of its own. With t nil, h itself.
func (t *Tracing) Handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" {
			r = r.WithContext(t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		h.ServeHTTP(w, r)
	})
}

// Span is the span of one client request. The zero Span — what a nil
// Tracing starts — does nothing.
type Span struct {
	t    *Tracing
	span trace.Span
}

// Start begins the span of a client request for method (tool: the tool or
// prompt it names, "" if none) whose params the client sent. Its name and
// mcp.method.name are the method as MethodLabel folds it (a client cannot
// name spans: names are what trace backends index), followed by tool —
// which the caller must bound likewise (Server.ToolLabel). Its parent is
// the trace context in params._meta (traceparent, tracestate: the key
// names the MCP 2026-07-28 revision reserves for it), else the one of ctx
// (an HTTP request's headers, see Handler); with both, the span is a child
// of the first and links the second.
func (t *Tracing) Start(ctx context.Context, method, tool string, params json.RawMessage) Span {
	if t == nil {
		return Span{}
	}
	return t.start(ctx, method, tool, params)
}

// Answered makes the span of a client request for method that mcpvisor
// answered itself, from start to now, as Start and End would: its parent
// is found as Start finds it, its name is the method (folded), and e (whose
// Local is set) describes its end.
func (t *Tracing) Answered(ctx context.Context, start time.Time, method string, params json.RawMessage, e End) {
	if t == nil {
		return
	}
	e.Local = true
	t.start(ctx, method, "", params, trace.WithTimestamp(start)).End(e)
}

func (t *Tracing) start(ctx context.Context, method, tool string, params json.RawMessage, extra ...trace.SpanStartOption) Span {
	method = MethodLabel(method)
	name := method
	if tool != "" {
		name += " " + tool
	}
	so := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attribute.String("mcp.method.name", method))}
	if meta := rpc.Member(params, "_meta"); meta != nil {
		tp, _ := rpc.StringMember(meta, "traceparent")
		if tp != "" {
			ts, _ := rpc.StringMember(meta, "tracestate")
			carrier := propagation.MapCarrier{"traceparent": tp}
			if ts != "" {
				carrier["tracestate"] = ts
			}
			if pc := trace.SpanContextFromContext(t.prop.Extract(context.Background(), carrier)); pc.IsValid() {
				if ambient := trace.SpanContextFromContext(ctx); ambient.IsValid() && !ambient.Equal(pc) {
					so = append(so, trace.WithLinks(trace.Link{SpanContext: ambient}))
				}
				ctx = trace.ContextWithRemoteSpanContext(ctx, pc)
			}
		}
	}
	_, sp := t.tracer.Start(ctx, name, append(so, extra...)...)
	return Span{t: t, span: sp}
}

// Inject returns params with the span's trace context in params._meta
// (traceparent, and tracestate when there is one), replacing what the
// client put there, so that the server's own spans join the trace. Params
// that are not a JSON object (or null) are returned as they are; a zero
// Span returns params.
func (s Span) Inject(params json.RawMessage) json.RawMessage {
	if s.span == nil || !s.span.SpanContext().IsValid() {
		return params
	}
	carrier := propagation.MapCarrier{}
	s.t.prop.Inject(trace.ContextWithSpan(context.Background(), s.span), carrier)
	tp := carrier["traceparent"]
	if tp == "" {
		return params
	}
	members := `"traceparent":` + strconv.Quote(tp)
	if ts := carrier["tracestate"]; ts != "" {
		members += `,"tracestate":` + strconv.Quote(ts)
	}
	p := rpc.DropMetaKeys(params, "traceparent", "tracestate")
	meta := rpc.Member(p, "_meta")
	if meta != nil && (len(meta) == 0 || meta[0] != '{') {
		return params // a _meta that is not an object: left alone
	}
	return rpc.SetMember(p, "_meta", rpc.PrependMembers(meta, []byte(members)))
}

// End describes how the request ended.
type End struct {
	Server string // the configured server it went to ("": none)
	Local  bool   // mcpvisor answered it itself (Answered sets it)
	// Refused: a front refused it before an endpoint saw it (a body that
	// is not JSON-RPC, an unknown session, headers that do not match
	// the body, ...); Local as well.
	Refused bool
	Tool    string // gen_ai.tool.name (tools/call)
	Outcome Outcome
	Code    int    // JSON-RPC error code, for a protocol error (0: the reply was no JSON-RPC error, as a front's plain HTTP refusal)
	Message string // the error's message, for a failure
	// Wake is how long the request waited for its server to start from
	// dormant (0: it did not).
	Wake      time.Duration
	Protocol  string // the client's MCP revision
	SessionID string // the client's session, if any (never a credential: see the gateway)
	RequestID json.RawMessage
}

// End ends the span with e's attributes; the status is an error for every
// outcome but OK. Called once per span: a second call is a no-op (the
// SDK's).
func (s Span) End(e End) {
	if s.span == nil {
		return
	}
	if s.span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 12)
		attrs = append(attrs, attribute.String("mcpvisor.outcome", e.Outcome.String()))
		if e.Server != "" {
			attrs = append(attrs, attribute.String("mcpvisor.server", e.Server))
		}
		if e.Local {
			attrs = append(attrs, attribute.Bool("mcpvisor.local", true))
		}
		if e.Refused {
			attrs = append(attrs, attribute.Bool("mcpvisor.refused", true))
		}
		if e.Tool != "" {
			attrs = append(attrs, attribute.String("gen_ai.tool.name", e.Tool), attribute.String("gen_ai.operation.name", "execute_tool"))
		}
		if et := ErrorType(e.Outcome, e.Code); et != "" {
			attrs = append(attrs, attribute.String("error.type", et))
		}
		if e.Outcome == ProtocolError && e.Code != 0 {
			attrs = append(attrs, attribute.String("rpc.response.status_code", strconv.Itoa(e.Code)))
		}
		if e.Wake > 0 {
			attrs = append(attrs, attribute.Float64("mcpvisor.wake_ms", float64(e.Wake.Microseconds())/1000))
		}
		if e.Protocol != "" {
			attrs = append(attrs, attribute.String("mcp.protocol.version", e.Protocol))
		}
		if e.SessionID != "" {
			attrs = append(attrs, attribute.String("mcp.session.id", e.SessionID))
		}
		if len(e.RequestID) > 0 {
			id := string(e.RequestID)
			if s, ok := rpc.String(e.RequestID); ok {
				id = s
			}
			attrs = append(attrs, attribute.String("jsonrpc.request.id", id))
		}
		s.span.SetAttributes(attrs...)
		if e.Outcome != OK {
			s.span.SetStatus(codes.Error, cut(e.Message, MaxAttributeLength))
		}
	}
	s.span.End()
}

// cut is s cut to at most n bytes, at a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// otlpExporter sends spans to an OTLP/HTTP receiver as protobuf
// (ExportTraceServiceRequest, opentelemetry-proto's
// collector/trace/v1). The encoding is written here, field by field:
// the OpenTelemetry exporter package links gRPC and its gateway (some
// 11 MB of binary) for options mcpvisor does not offer.
type otlpExporter struct {
	url     string
	headers http.Header
	gzip    bool
	client  *http.Client
}

// otlpConfig is the exporter's configuration: the flag's endpoint, else
// the environment's OTEL_EXPORTER_OTLP_* variables (the _TRACES_ one of
// each first), as the OpenTelemetry specification defines them.
func otlpConfig(flagURL string, getenv func(string) string) (*otlpExporter, error) {
	env := func(name string) (string, string) {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_" + name, "OTEL_EXPORTER_OTLP_" + name} {
			if v := strings.TrimSpace(getenv(k)); v != "" {
				return k, v
			}
		}
		return "", ""
	}
	e := &otlpExporter{url: flagURL, headers: http.Header{}}
	if e.url == "" {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); v != "" {
			e.url = v // the traces URL itself
		} else if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); v != "" {
			e.url = strings.TrimRight(v, "/") + "/v1/traces" // a base URL
		}
		u, err := url.Parse(e.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("OTLP endpoint %q: want an http or https URL with a host", e.url)
		}
	}
	if k, v := env("PROTOCOL"); v != "" && v != "http/protobuf" {
		return nil, fmt.Errorf("%s=%s: mcpvisor exports OTLP over HTTP with protobuf only (http/protobuf)", k, v)
	}
	if k, v := env("HEADERS"); v != "" {
		for kv := range strings.SplitSeq(v, ",") {
			name, val, ok := strings.Cut(kv, "=")
			name = strings.TrimSpace(name)
			if !ok || name == "" {
				return nil, fmt.Errorf("%s: %q is not key=value", k, kv)
			}
			if dec, err := url.PathUnescape(strings.TrimSpace(val)); err == nil {
				val = dec
			}
			e.headers.Set(name, val)
		}
	}
	timeout := 10 * time.Second
	if k, v := env("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("%s=%s: want a positive number of milliseconds", k, v)
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	switch k, v := env("COMPRESSION"); v {
	case "", "none":
	case "gzip":
		e.gzip = true
	default:
		return nil, fmt.Errorf("%s=%s: want gzip or none", k, v)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if k, v := env("CERTIFICATE"); v != "" {
		pem, err := os.ReadFile(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: %s holds no PEM certificate", k, v)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	for _, name := range []string{"CLIENT_CERTIFICATE", "CLIENT_KEY"} {
		if k, v := env(name); v != "" {
			return nil, fmt.Errorf("%s: client certificates are not supported by mcpvisor's OTLP exporter", k)
		}
	}
	e.client = &http.Client{Timeout: timeout, Transport: transport}
	return e, nil
}

// ExportSpans sends spans in one request, within ctx. A receiver that
// answers 429, 502, 503 or 504 is asked again twice, after 100 and 400
// ms, within ctx (a Retry-After is not read: the waits are short).
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	body := encodeSpans(spans)
	if e.gzip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = b.Bytes()
	}
	var err error
	for attempt, wait := range []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond} {
		if attempt > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return errors.Join(err, ctx.Err())
			case <-t.C:
			}
		}
		var retry bool
		if retry, err = e.post(ctx, body); !retry {
			return err
		}
	}
	return err
}

// post sends one request; retry says whether the answer asks for another.
func (e *otlpExporter) post(ctx context.Context, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	for k, v := range e.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("OTLP export to %s: %w", e.url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	err = fmt.Errorf("OTLP export to %s: %s %q", e.url, resp.Status, bytes.ToValidUTF8(msg, nil))
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true, err
	}
	return false, err
}

// Shutdown closes the exporter's idle connections.
func (e *otlpExporter) Shutdown(context.Context) error {
	e.client.CloseIdleConnections()
	return nil
}

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// pb appends protobuf fields to a buffer.
type pb []byte

func (b pb) tag(field, wire int) pb { return binary.AppendUvarint(b, uint64(field)<<3|uint64(wire)) }

func (b pb) bytes(field int, v []byte) pb {
	b = b.tag(field, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func (b pb) str(field int, v string) pb {
	if v == "" {
		return b
	}
	b = b.tag(field, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func (b pb) varint(field int, v uint64) pb {
	if v == 0 {
		return b
	}
	return binary.AppendUvarint(b.tag(field, wireVarint), v)
}

func (b pb) fixed64(field int, v uint64) pb {
	return binary.LittleEndian.AppendUint64(b.tag(field, wireFixed64), v)
}

func (b pb) fixed32(field int, v uint32) pb {
	return binary.LittleEndian.AppendUint32(b.tag(field, wireFixed32), v)
}

// msg appends a nested message made by fill (possibly empty).
func (b pb) msg(field int, fill func(pb) pb) pb { return b.bytes(field, fill(nil)) }

// encodeSpans is the ExportTraceServiceRequest of spans, grouped by
// resource and instrumentation scope.
func encodeSpans(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeKey struct {
		res   *resource.Resource
		scope instrumentation.Scope
	}
	var resOrder []*resource.Resource
	var order []scopeKey
	groups := map[scopeKey][]sdktrace.ReadOnlySpan{}
	seenRes := map[*resource.Resource]bool{}
	for _, s := range spans {
		sc := s.InstrumentationScope()
		k := scopeKey{s.Resource(), instrumentation.Scope{Name: sc.Name, Version: sc.Version, SchemaURL: sc.SchemaURL}}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], s)
		if !seenRes[k.res] {
			seenRes[k.res] = true
			resOrder = append(resOrder, k.res)
		}
	}
	var out pb
	for _, res := range resOrder {
		out = out.msg(1, func(rs pb) pb { // ResourceSpans
			rs = rs.msg(1, func(r pb) pb { // Resource
				if res != nil {
					r = attrs(r, 1, res.Attributes())
				}
				return r
			})
			for _, k := range order {
				if k.res != res {
					continue
				}
				rs = rs.msg(2, func(ss pb) pb { // ScopeSpans
					ss = ss.msg(1, func(sc pb) pb { return sc.str(1, k.scope.Name).str(2, k.scope.Version) })
					for _, s := range groups[k] {
						ss = ss.msg(2, func(sp pb) pb { return encodeSpan(sp, s) })
					}
					return ss.str(3, k.scope.SchemaURL)
				})
			}
			if res != nil {
				rs = rs.str(3, res.SchemaURL())
			}
			return rs
		})
	}
	return out
}

// encodeSpan appends the fields of one Span.
func encodeSpan(b pb, s sdktrace.ReadOnlySpan) pb {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = b.bytes(1, tid[:]).bytes(2, sid[:]).str(3, sc.TraceState().String())
	flags := uint32(sc.TraceFlags()) | 0x100 // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	if p := s.Parent(); p.IsValid() {
		psid := p.SpanID()
		b = b.bytes(4, psid[:])
		if p.IsRemote() {
			flags |= 0x200 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
		}
	}
	b = b.str(5, s.Name()).varint(6, uint64(spanKind(s.SpanKind())))
	b = b.fixed64(7, unixNano(s.StartTime())).fixed64(8, unixNano(s.EndTime()))
	b = attrs(b, 9, s.Attributes())
	b = b.varint(10, uint64(max(s.DroppedAttributes(), 0)))
	for _, ev := range s.Events() {
		b = b.msg(11, func(e pb) pb {
			e = e.fixed64(1, unixNano(ev.Time)).str(2, ev.Name)
			return attrs(e, 3, ev.Attributes).varint(4, uint64(max(ev.DroppedAttributeCount, 0)))
		})
	}
	b = b.varint(12, uint64(max(s.DroppedEvents(), 0)))
	for _, l := range s.Links() {
		b = b.msg(13, func(m pb) pb {
			ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			m = m.bytes(1, ltid[:]).bytes(2, lsid[:]).str(3, l.SpanContext.TraceState().String())
			m = attrs(m, 4, l.Attributes).varint(5, uint64(max(l.DroppedAttributeCount, 0)))
			lflags := uint32(l.SpanContext.TraceFlags()) | 0x100
			if l.SpanContext.IsRemote() {
				lflags |= 0x200
			}
			return m.fixed32(6, lflags)
		})
	}
	b = b.varint(14, uint64(max(s.DroppedLinks(), 0)))
	st := s.Status()
	b = b.msg(15, func(m pb) pb {
		code := 0
		switch st.Code {
		case codes.Ok:
			code = 1
		case codes.Error:
			code = 2
		}
		return m.str(2, st.Description).varint(3, uint64(code))
	})
	return b.fixed32(16, flags)
}

// spanKind is the OTLP SpanKind of k (the same numbers, with 0 for an
// unknown one).
func spanKind(k trace.SpanKind) int {
	if k >= trace.SpanKindInternal && k <= trace.SpanKindConsumer {
		return int(k)
	}
	return 0
}

func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}

// attrs appends each attribute as a KeyValue in field.
func attrs(b pb, field int, kvs []attribute.KeyValue) pb {
	for _, kv := range kvs {
		b = b.msg(field, func(m pb) pb {
			return m.str(1, string(kv.Key)).msg(2, func(v pb) pb { return anyValue(v, kv.Value) })
		})
	}
	return b
}

// anyValue appends the AnyValue fields of v.
func anyValue(b pb, v attribute.Value) pb {
	switch v.Type() {
	case attribute.STRING:
		s := v.AsString()
		b = b.tag(1, wireBytes)
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	case attribute.BOOL:
		n := uint64(0)
		if v.AsBool() {
			n = 1
		}
		return binary.AppendUvarint(b.tag(2, wireVarint), n)
	case attribute.INT64:
		return binary.AppendUvarint(b.tag(3, wireVarint), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return b.fixed64(4, math.Float64bits(v.AsFloat64()))
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.STRINGSLICE:
		return b.msg(5, func(arr pb) pb { // ArrayValue
			var items []attribute.Value
			switch v.Type() {
			case attribute.BOOLSLICE:
				for _, x := range v.AsBoolSlice() {
					items = append(items, attribute.BoolValue(x))
				}
			case attribute.INT64SLICE:
				for _, x := range v.AsInt64Slice() {
					items = append(items, attribute.Int64Value(x))
				}
			case attribute.FLOAT64SLICE:
				for _, x := range v.AsFloat64Slice() {
					items = append(items, attribute.Float64Value(x))
				}
			default:
				for _, x := range v.AsStringSlice() {
					items = append(items, attribute.StringValue(x))
				}
			}
			for _, it := range items {
				arr = arr.msg(1, func(m pb) pb { return anyValue(m, it) })
			}
			return arr
		})
	}
	return b.str(1, v.String())
}

package telemetry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// ended returns one ended span to export.
func ended(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	_, span := tp.Tracer("t").Start(context.Background(), "x")
	span.End()
	return sr.Ended()
}

// A receiver that answers 503 is asked again, twice at most; one that
// then takes the spans ends the export without an error.
func TestExportRetriesABusyReceiver(t *testing.T) {
	var n atomic.Int32
	busy := int32(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1) <= busy {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	e, err := otlpConfig(srv.URL, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ExportSpans(t.Context(), ended(t)); err != nil || n.Load() != 3 {
		t.Fatalf("export after two 503s: %v, %d requests (want nil, 3)", err, n.Load())
	}
	n.Store(0)
	busy = 10
	if err := e.ExportSpans(t.Context(), ended(t)); err == nil || n.Load() != 3 {
		t.Fatalf("export to a receiver always busy: %v, %d requests (want an error after 3)", err, n.Load())
	}
}

// An export is bounded by its context: one that ends while it waits to
// ask a busy receiver again returns at once, with the context's error.
func TestExportWithinItsContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	e, err := otlpConfig(srv.URL, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	defer cancel()
	if err := e.ExportSpans(ctx, ended(t)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("export past its context: %v, want its deadline", err)
	}
}

package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A request forwarded over a session that ends before its answer is
// cancelled at its server, with the reason it ended: its timeout (the
// flight's own end), its client going away (the HTTP request's context),
// the client's notifications/cancelled (the call's cancel) — each on the
// path a legacy session's request takes by default, which derives no
// context of its own — and the gateway forgets it. The last two go to a
// server whose timeout is a minute away, so that no timeout stands in
// for them.
func TestEndedRequestCancelledAtItsServer(t *testing.T) {
	var logs testserver.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w := newWorldLog(t, `{"a":{"command":"$FIXTURE","requestTimeout":"400ms"},"b":{"command":"$FIXTURE","requestTimeout":"1m"}}`, "", "", log)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.Close)
	post := func(ctx context.Context, sid, body string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", httpAccept)
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		}
		return http.DefaultClient.Do(req)
	}
	resp, err := post(t.Context(), "", httpInit)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp, err = post(t.Context(), sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sleep := func(id, server string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + server + `__sleep","arguments":{"ms":30000}}}`
	}
	// The fixture logs each cancellation it gets, with its reason; the
	// fleet logs the server's stderr lines (quoted).
	cancelledFor := func(reason string, n int) {
		t.Helper()
		want := `cancelled (reason \"` + reason + `\")`
		waitFor(t, "the server to get "+want, func() bool { return strings.Count(logs.String(), want) == n })
		waitFor(t, "the call to be forgotten", func() bool { return inFlight(w.gw) == 0 })
	}

	// Its timeout.
	resp, err = post(t.Context(), sid, sleep("1", "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "within 400ms") {
		t.Fatalf("past its timeout: %s", b)
	}
	cancelledFor(errTimeout.Error(), 1)

	// Its client goes away.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := post(ctx, sid, sleep("2", "b")); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, "the call in flight", func() bool { return inFlight(w.gw) == 1 })
	cancel()
	<-done
	cancelledFor("context canceled", 1)

	// Its client cancels it.
	done = make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := post(t.Context(), sid, sleep("3", "b")); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, "the call in flight", func() bool { return inFlight(w.gw) == 1 })
	if resp, err = post(t.Context(), sid, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled request's POST did not end")
	}
	cancelledFor(errClientCancel.Error(), 1)
}

// A flight with a cancel of its own answers as a context derived from its
// parent would: its context, made after its end, is ended already with
// its cause; made before, it ends with it; the first cause is kept; and
// when the parent ended first, the parent's cause is the flight's.
func TestFlightOwnCancel(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	own := func(parent context.Context) *flight {
		f := &flight{own: true, parent: parent, abort: make(chan struct{})}
		f.cancel = f.stop
		return f
	}
	f := own(t.Context())
	if f.err() != nil || f.causeErr() != nil {
		t.Fatalf("before its end: %v, %v", f.err(), f.causeErr())
	}
	f.cancel(errA)
	f.cancel(errB)
	if ctx := f.context(); ctx.Err() == nil || context.Cause(ctx) != errA {
		t.Fatalf("context made after the end: %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
	if !errors.Is(f.err(), context.Canceled) || f.causeErr() != errA {
		t.Fatalf("after the end: %v, %v", f.err(), f.causeErr())
	}
	select {
	case <-f.abort:
	default:
		t.Fatal("abort not closed at the end")
	}

	f = own(t.Context())
	ctx := f.context()
	f.cancel(nil)
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(f.causeErr(), context.Canceled) {
		t.Fatalf("context made before the end: %v, cause %v", ctx.Err(), f.causeErr())
	}

	parent, cancelParent := context.WithCancelCause(t.Context())
	f = own(parent)
	cancelParent(errB)
	if !errors.Is(f.err(), context.Canceled) || f.causeErr() != errB {
		t.Fatalf("the parent ended: %v, %v", f.err(), f.causeErr())
	}
	f.cancel(errTimeout)
	if f.causeErr() != errB {
		t.Fatalf("a timeout after the parent's end: cause %v, want the parent's", f.causeErr())
	}
}

package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for concurrent use: a log sink.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A request forwarded over a session that ends before its answer is
// cancelled at its server, with the reason it ended: its timeout (the
// flight's own end), its client going away (the HTTP request's context),
// the client's notifications/cancelled (the call's cancel) — each on the
// path a legacy session's request takes by default, which derives no
// context of its own — and the gateway forgets it.
func TestEndedRequestCancelledAtItsServer(t *testing.T) {
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w := newWorldLog(t, `{"a":{"command":"$FIXTURE","requestTimeout":"400ms"}}`, "", "", log)
	h := NewStreamableHandler(w.gw.Single("a"), HTTPOptions{})
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
	sleep := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":30000}}}`
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
	resp, err = post(t.Context(), sid, sleep("1"))
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
		if resp, err := post(ctx, sid, sleep("2")); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, "the call in flight", func() bool { return inFlight(w.gw) == 1 })
	cancel()
	<-done
	cancelledFor("context canceled", 1)

	// Its client cancels it. (Within its timeout: the cancel comes first.)
	done = make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := post(t.Context(), sid, sleep("3")); err == nil {
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

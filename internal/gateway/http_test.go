package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// decodeBody decodes a JSON-RPC message body.
func decodeBody(t *testing.T, resp *http.Response) *rpc.Message {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	m, err := rpc.Decode(b)
	if err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return m
}

func TestHTTPBadRequests(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initialize()

	cases := []struct {
		name, method, sid, body string
		hdr                     map[string]string
		status, code            int // code: the JSON-RPC error code of the body, if any
		id                      string
	}{
		{name: "no session", method: "POST", body: `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`, status: 400, code: rpc.InvalidRequest, id: "7"},
		{name: "bad JSON", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":`, status: 400, code: rpc.ParseError, id: "null"},
		{name: "empty body", method: "POST", sid: sid, body: ``, status: 400, code: rpc.ParseError, id: "null"},
		{name: "batch", method: "POST", sid: sid, body: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, status: 400, code: rpc.InvalidRequest, id: "null"},
		{name: "not JSON-RPC", method: "POST", sid: sid, body: `{"jsonrpc":"1.0","id":3,"method":"ping"}`, status: 400, code: rpc.InvalidRequest, id: "3"},
		{name: "bad protocol version", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			hdr: map[string]string{"MCP-Protocol-Version": "2099-01-01"}, status: 400, code: rpc.UnsupportedProtocolVersion, id: "1"},
		{name: "bad protocol version on GET", method: "GET", sid: sid, hdr: map[string]string{"MCP-Protocol-Version": "1999-01-01"}, status: 400},
		{name: "bad protocol version on DELETE", method: "DELETE", sid: sid, hdr: map[string]string{"MCP-Protocol-Version": "x"}, status: 400},
		{name: "GET without session", method: "GET", status: 400},
		{name: "DELETE without session", method: "DELETE", status: 400},
		{name: "malformed Last-Event-ID", method: "GET", sid: sid, hdr: map[string]string{"Last-Event-ID": "abc"}, status: 400},
		{name: "unknown session POST", method: "POST", sid: "nope", body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`, status: 404},
		{name: "unknown session GET", method: "GET", sid: "nope", status: 404},
		{name: "unknown session DELETE", method: "DELETE", sid: "nope", status: 404},
		{name: "POST accepts neither", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			hdr: map[string]string{"Accept": "text/html"}, status: 406},
		{name: "POST accept q=0", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			hdr: map[string]string{"Accept": "application/json;q=0, text/event-stream;q=0"}, status: 406},
		{name: "GET without event-stream", method: "GET", sid: sid, hdr: map[string]string{"Accept": "application/json"}, status: 406},
		{name: "PUT", method: "PUT", sid: sid, status: 405},
		{name: "PATCH", method: "PATCH", status: 405},
		{name: "good protocol version", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			hdr: map[string]string{"MCP-Protocol-Version": "2025-06-18"}, status: 200},
		{name: "no Accept header", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			hdr: map[string]string{"Accept": ""}, status: 200},
		{name: "Accept */*", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			hdr: map[string]string{"Accept": "*/*"}, status: 200},
		{name: "notification", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`, status: 202},
		{name: "response", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":"x","result":{}}`, status: 202},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := s.do(c.method, c.sid, c.body, c.hdr)
			if resp.StatusCode != c.status {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, c.status, b)
			}
			if c.status == 405 && resp.Header.Get("Allow") != "GET, POST, DELETE" {
				t.Errorf("Allow = %q", resp.Header.Get("Allow"))
			}
			if c.status == 202 {
				if b, _ := io.ReadAll(resp.Body); len(b) != 0 {
					t.Errorf("202 with a body: %q", b)
				}
			}
			if c.code == 0 {
				resp.Body.Close()
				return
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			m := decodeBody(t, resp)
			if m.Error == nil || m.Error.Code != c.code || string(m.ID) != c.id {
				t.Errorf("body %s, want error %d with id %s", m.Encode(), c.code, c.id)
			}
		})
	}
}

func TestHTTPDeletedSession(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initialize()
	if n := s.h.Sessions(); n != 1 {
		t.Fatalf("Sessions() = %d", n)
	}
	get, r := s.openGET(sid, "")
	defer get.Body.Close()
	if st := s.status("DELETE", sid, "", nil); st != http.StatusNoContent {
		t.Fatalf("DELETE: %d", st)
	}
	if _, err := r.next(); err != io.EOF {
		t.Errorf("GET stream after DELETE: %v", err)
	}
	if got := <-s.fake.closedCh; got.ID != sid {
		t.Fatalf("endpoint closed %q, want %q", got.ID, sid)
	}
	if n := s.h.Sessions(); n != 0 {
		t.Fatalf("Sessions() = %d after DELETE", n)
	}
	for _, method := range []string{"POST", "GET", "DELETE"} {
		body := ""
		if method == "POST" {
			body = `{"jsonrpc":"2.0","id":2,"method":"ping"}`
		}
		if st := s.status(method, sid, body, nil); st != http.StatusNotFound {
			t.Errorf("%s after DELETE: %d, want 404", method, st)
		}
	}
}

func TestHTTPBodyLimit(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{MaxBodyBytes: 1024})
	sid := s.initialize()
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("x", 2000) + `"}}}`
	if st := s.status("POST", sid, big, nil); st != http.StatusRequestEntityTooLarge {
		t.Errorf("with Content-Length: %d, want 413", st)
	}
	// Chunked: no Content-Length, the limit applies while reading.
	req, _ := http.NewRequest("POST", s.url, io.MultiReader(strings.NewReader(big)))
	req.Header.Set("Accept", httpAccept)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: %d, want 413", resp.StatusCode)
	}
	// A chunked body under the limit is fine.
	small := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
	req, _ = http.NewRequest("POST", s.url, io.MultiReader(strings.NewReader(small)))
	req.Header.Set("Accept", httpAccept)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err = s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if m := decodeBody(t, resp); m.Error != nil || !strings.Contains(string(m.Result), `"hi"`) {
		t.Errorf("chunked echo: %s", m.Encode())
	}
}

func TestHTTPToken(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{Access: guard.Options{Token: "s3cret"}})
	for _, auth := range []string{"", "Bearer wrong", "Basic czNjcmV0", "Bearer s3cret2"} {
		resp := s.do("POST", "", httpInit, map[string]string{"Authorization": auth})
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, resp.StatusCode)
		}
		if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: WWW-Authenticate %q", auth, resp.Header.Get("WWW-Authenticate"))
		}
	}
	if s.fake.opened.Load() != 0 {
		t.Fatal("a session was opened without the token")
	}
	for _, auth := range []string{"Bearer s3cret", "bearer s3cret"} {
		resp := s.do("POST", "", httpInit, map[string]string{"Authorization": auth})
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Authorization %q: %d, want 200", auth, resp.StatusCode)
		}
	}
}

func TestHTTPHostAndOrigin(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{Access: guard.Options{AllowedOrigins: []string{"https://app.example/"}}})
	cases := []struct {
		host, origin string
		status       int
	}{
		{"", "", 200}, // the test server's own 127.0.0.1:port
		{"localhost:7331", "", 200},
		{"LOCALHOST", "", 200},
		{"[::1]:7331", "", 200},
		{"127.0.0.2:80", "", 200},
		{"mcp.localhost:7331", "", 200},
		{"evil.example", "", 403},
		{"evil.example:7331", "", 403},
		{"127.0.0.1.evil.example", "", 403},
		{"localhost.evil.example:80", "", 403},
		{"", "http://evil.example", 403},
		{"", "null", 403},
		{"", "http://localhost:5173", 200},
		{"", "http://127.0.0.1:8080", 200},
		{"", "http://[::1]:8080", 200},
		{"", "https://app.example", 200},
		{"", "https://APP.example", 200},
		{"", "https://app.example:8443", 403},
		{"evil.example:7331", "http://evil.example:7331", 403}, // DNS rebinding: same origin, wrong host
	}
	for _, c := range cases {
		hdr := map[string]string{}
		if c.host != "" {
			hdr["Host"] = c.host
		}
		if c.origin != "" {
			hdr["Origin"] = c.origin
		}
		if st := s.status("POST", "", httpInit, hdr); st != c.status {
			t.Errorf("Host %q Origin %q: %d, want %d", c.host, c.origin, st, c.status)
		}
	}

	open := newHTTPTestServer(t, HTTPOptions{Access: guard.Options{DisableHostCheck: true}})
	if st := open.status("POST", "", httpInit, map[string]string{"Host": "mcp.example:7331"}); st != 200 {
		t.Errorf("DisableHostCheck: %d, want 200", st)
	}
	if st := open.status("POST", "", httpInit, map[string]string{"Origin": "http://evil.example"}); st != 403 {
		t.Errorf("DisableHostCheck keeps the Origin check: %d, want 403", st)
	}
	any := newHTTPTestServer(t, HTTPOptions{Access: guard.Options{AllowedOrigins: []string{"*"}}})
	if st := any.status("POST", "", httpInit, map[string]string{"Origin": "http://evil.example"}); st != 200 {
		t.Errorf("AllowedOrigins *: %d, want 200", st)
	}
}

func TestHTTPAcceptParsing(t *testing.T) {
	cases := []struct {
		accept    []string
		json, sse bool
	}{
		{nil, true, true},
		{[]string{"application/json, text/event-stream"}, true, true},
		{[]string{"text/event-stream, application/json"}, true, true},
		{[]string{"application/json", "text/event-stream"}, true, true},
		{[]string{"*/*"}, true, true},
		{[]string{"text/html, */*;q=0.8"}, true, true},
		{[]string{"application/json;charset=utf-8"}, true, false},
		{[]string{"Application/JSON"}, true, false},
		{[]string{"application/*"}, true, false},
		{[]string{"text/event-stream"}, false, true},
		{[]string{"text/*"}, false, true},
		{[]string{"text/html"}, false, false},
		{[]string{"application/json; q=0, text/event-stream"}, false, true},
	}
	for _, c := range cases {
		j, s := accepts(c.accept)
		if j != c.json || s != c.sse {
			t.Errorf("accepts(%q) = %v, %v; want %v, %v", c.accept, j, s, c.json, c.sse)
		}
	}
}

func TestHTTPReplyJSONOrSSE(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initialize()

	// The response comes first: a plain JSON reply.
	resp := s.do("POST", sid, `{"jsonrpc":"2.0","id":"e1","method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`, nil)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("echo: Content-Type %q", ct)
	}
	if m := decodeBody(t, resp); string(m.ID) != `"e1"` || !strings.Contains(string(m.Result), `"hello"`) {
		t.Fatalf("echo: %s", m.Encode())
	}

	// Related messages first: an event stream, the response last.
	resp = s.do("POST", sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"progress","_meta":{"progressToken":"p"}}}`, nil)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("progress: Content-Type %q", ct)
	}
	r := newSSEReader(resp.Body)
	var ids []string
	for i := 1; i <= 4; i++ {
		ev, err := r.next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		ids = append(ids, ev.id)
		m, err := rpc.Decode([]byte(ev.data))
		if err != nil {
			t.Fatalf("event %d: %q: %v", i, ev.data, err)
		}
		if ev.name != "message" {
			t.Errorf("event %d named %q", i, ev.name)
		}
		if i < 4 {
			if m.Method != "notifications/progress" || string(rpc.ProgressToken(m.Params)) != `"p"` {
				t.Errorf("event %d: %s", i, ev.data)
			}
		} else if string(m.ID) != "2" || !strings.Contains(string(m.Result), "done") {
			t.Errorf("last event: %s", ev.data)
		}
	}
	if _, err := r.next(); err != io.EOF {
		t.Errorf("stream did not end after the response: %v", err)
	}
	resp.Body.Close()
	if strings.Join(ids, " ") != "1_1 1_2 1_3 1_4" {
		t.Errorf("event ids %v", ids)
	}

	// A client that takes only event streams gets one even for a quick answer.
	resp = s.do("POST", sid, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, map[string]string{"Accept": "text/event-stream"})
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("SSE only: Content-Type %q", ct)
	}
	r = newSSEReader(resp.Body)
	if ev, err := r.next(); err != nil || ev.data != `{"jsonrpc":"2.0","id":3,"result":{}}` || ev.id != "2_1" {
		t.Fatalf("SSE only: %+v %v", ev, err)
	}
	if _, err := r.next(); err != io.EOF {
		t.Errorf("SSE only: stream did not end: %v", err)
	}
	resp.Body.Close()

	// A client that takes only JSON gets no related messages.
	resp = s.do("POST", sid, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"progress"}}`, map[string]string{"Accept": "application/json"})
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("JSON only: Content-Type %q", ct)
	}
	if m := decodeBody(t, resp); !strings.Contains(string(m.Result), ErrNoStream.Error()) {
		t.Errorf("JSON only: %s", m.Encode())
	}
}

func TestStreamableRawSampling(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initialize()
	resp := s.do("POST", sid, `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"sample"}}`, nil)
	defer resp.Body.Close()
	r := newSSEReader(resp.Body)
	ev, err := r.next()
	if err != nil {
		t.Fatal(err)
	}
	req, err := rpc.Decode([]byte(ev.data))
	if err != nil || req.Method != "sampling/createMessage" || !req.IsRequest() {
		t.Fatalf("first event %q: %v", ev.data, err)
	}
	answer := `{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"hello"}}}`
	if st := s.status("POST", sid, answer, nil); st != http.StatusAccepted {
		t.Fatalf("posting the sampling result: %d", st)
	}
	ev, err = r.next()
	if err != nil {
		t.Fatal(err)
	}
	if m, err := rpc.Decode([]byte(ev.data)); err != nil || string(m.ID) != "10" || !strings.Contains(string(m.Result), "sampled: hello") {
		t.Fatalf("response %q: %v", ev.data, err)
	}
}

// push sends a message to the session's GET stream through the
// endpoint's Sink.
func (s *httpTestServer) push(sid, method string) {
	s.t.Helper()
	sess := s.fake.session(sid)
	if sess == nil {
		s.t.Fatalf("no session %q", sid)
	}
	if err := sess.Out().Send(&rpc.Message{Method: method}); err != nil {
		s.t.Fatalf("Out().Send: %v", err)
	}
}

// openGET opens the GET stream and reads the comment that opens it.
func (s *httpTestServer) openGET(sid, lastEventID string) (*http.Response, *sseReader) {
	s.t.Helper()
	hdr := map[string]string{"Accept": "text/event-stream"}
	if lastEventID != "" {
		hdr["Last-Event-ID"] = lastEventID
	}
	resp := s.do("GET", sid, "", hdr)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		s.t.Fatalf("GET: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := newSSEReader(resp.Body)
	if err := r.comment("ok"); err != nil {
		s.t.Fatalf("GET: first %v", err)
	}
	return resp, r
}

// expect reads events and checks their ids and methods ("0_1 a", ...).
func expectEvents(t *testing.T, r *sseReader, want ...string) {
	t.Helper()
	for _, w := range want {
		ev, err := r.next()
		if err != nil {
			t.Fatalf("want %q: %v", w, err)
		}
		m, err := rpc.Decode([]byte(ev.data))
		if err != nil {
			t.Fatalf("event %q: %v", ev.data, err)
		}
		if got := ev.id + " " + m.Method; got != w {
			t.Fatalf("event %q, want %q", got, w)
		}
	}
}

func TestStreamableGETStream(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initialize()

	// Sent before any stream: kept, delivered when one opens.
	s.push(sid, "n/1")
	s.push(sid, "n/2")
	s.push(sid, "n/3")
	resp, r := s.openGET(sid, "")
	expectEvents(t, r, "0_1 n/1", "0_2 n/2", "0_3 n/3")
	s.push(sid, "n/4")
	expectEvents(t, r, "0_4 n/4")
	resp.Body.Close() // the client goes away

	s.push(sid, "n/5")
	s.push(sid, "n/6")
	// Resumption: everything after the last event the client saw.
	resp, r = s.openGET(sid, "0_2")
	expectEvents(t, r, "0_3 n/3", "0_4 n/4", "0_5 n/5", "0_6 n/6")
	resp.Body.Close()
	// (A stream writing to a connection that has just died counts what it
	// wrote as delivered; wait until the server has seen it go.)
	waitFor(t, "the GET stream to end", func() bool { return !hasGET(s.h, sid) })

	// Without Last-Event-ID: only what no stream has written yet.
	s.push(sid, "n/7")
	resp, r = s.openGET(sid, "")
	expectEvents(t, r, "0_7 n/7")
	resp.Body.Close()

	// The Last-Event-ID of a POST stream: nothing to resume, the stream ends.
	resp = s.do("GET", sid, "", map[string]string{"Last-Event-ID": "3_1"})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET resuming a POST stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if b, _ := io.ReadAll(resp.Body); len(b) != 0 {
		t.Errorf("GET resuming a POST stream: body %q", b)
	}
	resp.Body.Close()
	if s.h.Dropped() != 0 {
		t.Errorf("Dropped() = %d", s.h.Dropped())
	}
}

func TestStreamableGETReplacesOlderStream(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initialize()
	first, r1 := s.openGET(sid, "")
	defer first.Body.Close()
	second, r2 := s.openGET(sid, "")
	defer second.Body.Close()
	if _, err := r1.next(); err != io.EOF {
		t.Fatalf("the older stream did not end: %v", err)
	}
	s.push(sid, "n/1")
	expectEvents(t, r2, "0_1 n/1")
}

func TestStreamableGETBufferOverflow(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{EventBuffer: 2})
	sid := s.initialize()
	for range 5 {
		s.push(sid, "n/x")
	}
	if d := s.h.Dropped(); d != 3 {
		t.Errorf("Dropped() = %d, want 3", d)
	}
	resp, r := s.openGET(sid, "")
	defer resp.Body.Close()
	expectEvents(t, r, "0_4 n/x", "0_5 n/x")
}

func TestStreamableKeepAlive(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{KeepAlive: 5 * time.Millisecond})
	sid := s.initialize()
	resp, r := s.openGET(sid, "")
	defer resp.Body.Close()
	if err := r.comment("ping"); err != nil {
		t.Fatalf("want a ping comment, got %v", err)
	}
}

func TestStreamableClientGoneCancels(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initialize()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block"}}`))
	req.Header.Set("Accept", httpAccept)
	req.Header.Set("Mcp-Session-Id", sid)
	errc := make(chan error, 1)
	go func() {
		resp, err := s.srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	// Wait until the endpoint has the call, then go away.
	waitFor(t, "the call to be in flight", func() bool { return activeOf(s.h, sid) == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("client: %v", err)
	}
	<-s.fake.cancelled // the endpoint saw its ctx end
}

// hasGET reports whether a session has its GET stream open.
func hasGET(h *StreamableHandler, sid string) bool {
	h.mu.RLock()
	hs := h.sessions[sid]
	h.mu.RUnlock()
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.get != nil
}

// activeOf reports a session's requests in flight and GET streams open.
func activeOf(h *StreamableHandler, sid string) int32 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if hs := h.sessions[sid]; hs != nil {
		s := hs.place.state.Load()
		return int32(s&placeReqMask + s&placeStreamMask/placeStream)
	}
	return -1
}

func TestStreamablePOSTStreamSinkAfterClientGone(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initialize()
	resp := s.do("POST", sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sample"}}`, nil)
	r := newSSEReader(resp.Body)
	if _, err := r.next(); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The sample call waits for its ctx, answers, and the stream ends.
	waitFor(t, "the call to end", func() bool { return activeOf(s.h, sid) == 0 })
}

func TestStreamableInitializeError(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	resp := s.do("POST", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"refuse"}}`, nil)
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		t.Errorf("a failed initialize got session %q", sid)
	}
	if m := decodeBody(t, resp); m.Error == nil || m.Error.Code != rpc.InvalidParams {
		t.Errorf("body %s", m.Encode())
	}
	<-s.fake.closedCh
	if s.h.Sessions() != 0 {
		t.Errorf("Sessions() = %d", s.h.Sessions())
	}
}

func TestStreamableHandlerClose(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initialize()
	s.initialize()
	resp, r := s.openGET(sid, "")
	defer resp.Body.Close()
	s.h.Close()
	if _, err := r.next(); err != io.EOF {
		t.Errorf("GET stream after Close: %v", err)
	}
	if n := s.fake.closed.Load(); n != 2 {
		t.Errorf("endpoint closed %d sessions, want 2", n)
	}
	if s.h.Sessions() != 0 {
		t.Errorf("Sessions() = %d", s.h.Sessions())
	}
	if st := s.status("POST", "", httpInit, nil); st != http.StatusServiceUnavailable {
		t.Errorf("initialize after Close: %d, want 503", st)
	}
	if st := s.status("POST", sid, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil); st != http.StatusNotFound {
		t.Errorf("POST after Close: %d, want 404", st)
	}
	if err := s.fake.session(sid).Out().Send(&rpc.Message{Method: "n/x"}); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Out().Send after Close: %v", err)
	}
}

// serveRecorded runs one request through h without a network.
func serveRecorded(h http.Handler, method, sid, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/mcp", strings.NewReader(body))
	req.Header.Set("Accept", httpAccept)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestStreamableSessionExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHTTPFake()
		h := NewStreamableHandler(f, HTTPOptions{SessionTimeout: time.Minute})
		defer h.Close()
		ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`

		rec := serveRecorded(h, "POST", "", httpInit)
		sid := rec.Header().Get("Mcp-Session-Id")
		if rec.Code != 200 || sid == "" {
			t.Fatalf("initialize: %d %q", rec.Code, rec.Body)
		}
		other := serveRecorded(h, "POST", "", httpInit).Header().Get("Mcp-Session-Id")

		// Activity keeps a session alive.
		for range 3 {
			time.Sleep(40 * time.Second)
			if rec := serveRecorded(h, "POST", sid, ping); rec.Code != 200 {
				t.Fatalf("ping: %d", rec.Code)
			}
		}
		synctest.Wait()
		if h.Sessions() != 1 {
			t.Fatalf("Sessions() = %d, want 1 (the idle one expired)", h.Sessions())
		}
		if rec := serveRecorded(h, "POST", other, ping); rec.Code != 404 {
			t.Fatalf("expired session: %d, want 404", rec.Code)
		}
		if got := <-f.closedCh; got.ID != other {
			t.Fatalf("endpoint closed %q, want %q", got.ID, other)
		}

		// An open GET stream keeps it from expiring too.
		stop, _ := recordedStream(t, h, sid)
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if h.Sessions() != 1 {
			t.Fatalf("Sessions() = %d with a GET stream open", h.Sessions())
		}
		stop()
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		if h.Sessions() != 0 {
			t.Fatalf("Sessions() = %d, want 0", h.Sessions())
		}
		if rec := serveRecorded(h, "POST", sid, ping); rec.Code != 404 {
			t.Fatalf("expired session: %d, want 404", rec.Code)
		}
		if n := f.closed.Load(); n != 2 {
			t.Fatalf("endpoint closed %d sessions, want 2", n)
		}
	})
}

func TestHTTPEventIDs(t *testing.T) {
	for _, c := range []struct {
		id          string
		stream, seq uint64
		ok          bool
	}{
		{"0_1", 0, 1, true}, {"12_345", 12, 345, true}, {"", 0, 0, false}, {"5", 0, 0, false},
		{"a_1", 0, 0, false}, {"1_", 0, 0, false}, {"-1_2", 0, 0, false},
	} {
		stream, seq, ok := parseEventID(c.id)
		if ok != c.ok || (ok && (stream != c.stream || seq != c.seq)) {
			t.Errorf("parseEventID(%q) = %d, %d, %v", c.id, stream, seq, ok)
		}
	}
	b := appendSSE(nil, 3, 4, sseClean([]byte("{\"a\":\r1}"), 0))
	if string(b) != "id: 3_4\nevent: message\ndata: {\"a\": 1}\n\n" {
		t.Errorf("appendSSE: %q", b)
	}
	m := &rpc.Message{ID: json.RawMessage("1"), Result: json.RawMessage("{\"a\":\r\n1}")}
	if got := string(encodeEvent(m)); strings.ContainsAny(got, "\r\n") {
		t.Errorf("encodeEvent left a line break: %q", got)
	}
}

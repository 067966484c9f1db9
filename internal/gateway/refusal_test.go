package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// countsOf is every count a refusal could move: each series of the
// gateway's Local ("method outcome"), each HTTP refusal reason
// ("http reason"), and each server's calls ("server name outcome").
func countsOf(w *world) map[string]uint64 {
	m := map[string]uint64{}
	l := w.gw.LocalRequests()
	l.Each(func(method string, o telemetry.Outcome, n uint64) { m[method+" "+o.String()] = n })
	l.EachRefusal(func(reason string, n uint64) { m["http "+reason] = n })
	for _, srv := range w.fleet.Servers() {
		for o, n := range srv.Telemetry().Calls() {
			m["server "+srv.Name()+" "+telemetry.Outcome(o).String()] = n
		}
	}
	return m
}

// moved is what changed from before to after, by how much.
func moved(before, after map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, n := range after {
		if n != before[k] {
			d[k] = n - before[k]
		}
	}
	return d
}

// expectMoved runs act and fails t unless exactly want moved.
func expectMoved(t *testing.T, w *world, want map[string]uint64, act func()) {
	t.Helper()
	before := countsOf(w)
	act()
	if got := moved(before, countsOf(w)); !maps.Equal(got, want) {
		t.Errorf("moved %v, want %v", got, want)
	}
}

// one is a single count of key.
func one(key string) map[string]uint64 { return map[string]uint64{key: 1} }

// gatewayHTTP serves ep over a test server, as httpTestServer.
func gatewayHTTP(t *testing.T, ep Endpoint, opts HTTPOptions) *httpTestServer {
	t.Helper()
	h := NewStreamableHandler(ep, opts)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close()
		srv.Close()
	})
	return &httpTestServer{t: t, h: h, srv: srv, url: srv.URL}
}

const init0326 = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// Every POST the HTTP front refuses before its endpoint sees it counts
// once in the gateway's requests — by its method if it was read, else
// _OTHER; a protocol error — and nothing else moves; every other HTTP
// request it refuses (GET, DELETE, another method, the access guard's)
// counts once by its reason.
func TestHTTPRefusalsCounted(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	s := gatewayHTTP(t, w.gw.Aggregate(), HTTPOptions{MaxBodyBytes: 4096})
	sid := s.initialize()
	resp := s.do("POST", "", init0326, nil)
	resp.Body.Close()
	sid0326 := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid0326 == "" {
		t.Fatalf("initialize at 2025-03-26: %d", resp.StatusCode)
	}
	modern := func(method, name string) map[string]string { return modernHeaders(method, name) }
	meta := modernMeta(`{}`)

	for _, c := range []struct {
		name, method, sid, body string
		hdr                     map[string]string
		status                  int
		want                    map[string]uint64
	}{
		// POST: the gateway's requests.
		{name: "Accept neither", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			hdr: map[string]string{"Accept": "text/html"}, status: 406, want: one("_OTHER protocol_error")},
		{name: "body too large", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("x", 5000) + `"}}`,
			status: 413, want: one("_OTHER protocol_error")},
		{name: "not JSON", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":`, status: 400, want: one("_OTHER protocol_error")},
		{name: "empty body", method: "POST", sid: sid, body: ``, status: 400, want: one("_OTHER protocol_error")},
		{name: "not JSON-RPC", method: "POST", sid: sid, body: `{"jsonrpc":"1.0","id":3,"method":"ping"}`, status: 400, want: one("_OTHER protocol_error")},
		{name: "unsupported protocol version", method: "POST", sid: sid, body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			hdr: map[string]string{"MCP-Protocol-Version": "2099-01-01"}, status: 400, want: one("ping protocol_error")},
		{name: "no session", method: "POST", body: `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`, status: 400, want: one("tools/list protocol_error")},
		{name: "unknown session", method: "POST", sid: "nope", body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`, status: 404, want: one("ping protocol_error")},
		{name: "unknown session, a notification", method: "POST", sid: "nope", body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`, status: 404, want: one("_OTHER protocol_error")},
		{name: "batch without a session", method: "POST", body: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, status: 400, want: one("_OTHER protocol_error")},
		{name: "batch of an unknown session", method: "POST", sid: "nope", body: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, status: 404, want: one("_OTHER protocol_error")},
		{name: "batch at 2025-11-25", method: "POST", sid: sid, body: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, status: 400, want: one("_OTHER protocol_error")},
		{name: "empty batch", method: "POST", sid: sid0326, body: `[]`, status: 400, want: one("_OTHER protocol_error")},
		{name: "batch not JSON", method: "POST", sid: sid0326, body: `[{"jsonrpc":`, status: 400, want: one("_OTHER protocol_error")},
		{name: "batch elements refused", method: "POST", sid: sid0326,
			body:   `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"1.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}]`,
			status: 200, want: map[string]uint64{"ping ok": 1, "_OTHER protocol_error": 1, "initialize protocol_error": 1}},
		{name: "modern response", method: "POST", body: `{"jsonrpc":"2.0","id":1,"result":{}}`, hdr: modern("tools/list", ""), status: 400, want: one("_OTHER protocol_error")},
		{name: "modern without _meta", method: "POST", body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, hdr: modern("tools/list", ""), status: 400, want: one("tools/list protocol_error")},
		{name: "modern _meta not an object", method: "POST", body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":[]}}`, hdr: modern("tools/list", ""), status: 400, want: one("tools/list protocol_error")},
		{name: "modern bad log level", method: "POST", body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"loud"}}}`,
			hdr: modern("tools/list", ""), status: 400, want: one("tools/list protocol_error")},
		{name: "modern without the version header", method: "POST", body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`,
			hdr: map[string]string{"Mcp-Method": "tools/list"}, status: 400, want: one("tools/list protocol_error")},
		{name: "Mcp-Method mismatch", method: "POST", body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`,
			hdr: modern("prompts/list", ""), status: 400, want: one("tools/list protocol_error")},
		{name: "Mcp-Name missing", method: "POST", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo",` + meta + `}}`,
			hdr: modern("tools/call", ""), status: 400, want: one("tools/call protocol_error")},
		{name: "Mcp-Name mismatch", method: "POST", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo",` + meta + `}}`,
			hdr: modern("tools/call", "a__other"), status: 400, want: one("tools/call protocol_error")},
		{name: "a made-up method, modern, mismatched", method: "POST", body: `{"jsonrpc":"2.0","id":1,"method":"x/y","params":{` + meta + `}}`,
			hdr: modern("x/z", ""), status: 400, want: one("_OTHER protocol_error")},

		// The others: by reason.
		{name: "PUT", method: "PUT", sid: sid, status: 405, want: one("http method_not_allowed")},
		{name: "modern GET", method: "GET", sid: sid, hdr: map[string]string{"MCP-Protocol-Version": modernVersion}, status: 405, want: one("http method_not_allowed")},
		{name: "modern DELETE", method: "DELETE", sid: sid, hdr: map[string]string{"MCP-Protocol-Version": modernVersion}, status: 405, want: one("http method_not_allowed")},
		{name: "GET without event-stream", method: "GET", sid: sid, hdr: map[string]string{"Accept": "application/json"}, status: 406, want: one("http not_acceptable")},
		{name: "GET unsupported version", method: "GET", sid: sid, hdr: map[string]string{"MCP-Protocol-Version": "1999-01-01"}, status: 400, want: one("http unsupported_version")},
		{name: "DELETE unsupported version", method: "DELETE", sid: sid, hdr: map[string]string{"MCP-Protocol-Version": "x"}, status: 400, want: one("http unsupported_version")},
		{name: "GET without session", method: "GET", status: 400, want: one("http session_required")},
		{name: "DELETE without session", method: "DELETE", status: 400, want: one("http session_required")},
		{name: "malformed Last-Event-ID", method: "GET", sid: sid, hdr: map[string]string{"Last-Event-ID": "abc"}, status: 400, want: one("http bad_last_event_id")},
		{name: "GET unknown session", method: "GET", sid: "nope", status: 404, want: one("http session_not_found")},
		{name: "DELETE unknown session", method: "DELETE", sid: "nope", status: 404, want: one("http session_not_found")},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectMoved(t, w, c.want, func() {
				if st := s.status(c.method, c.sid, c.body, c.hdr); st != c.status {
					t.Errorf("status %d, want %d", st, c.status)
				}
			})
		})
	}

	// Served, not refused: nothing but the endpoint's own count moves.
	t.Run("served", func(t *testing.T) {
		expectMoved(t, w, one("ping ok"), func() {
			if st := s.status("POST", sid, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil); st != 200 {
				t.Errorf("ping: %d", st)
			}
		})
		expectMoved(t, w, map[string]uint64{}, func() {
			if st := s.status("POST", sid, `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`, nil); st != 202 {
				t.Errorf("notification: %d", st)
			}
		})
	})
}

// The access guard's refusals of an MCP endpoint count by reason.
func TestHTTPGuardRefusalsCounted(t *testing.T) {
	w := newWorld(t, `{}`)
	s := gatewayHTTP(t, w.gw.Aggregate(), HTTPOptions{Access: guard.Options{Token: "secret"}})
	expectMoved(t, w, one("http unauthorized"), func() {
		if st := s.status("POST", "", httpInit, nil); st != 401 {
			t.Errorf("no token: %d", st)
		}
	})
	expectMoved(t, w, one("http forbidden"), func() {
		if st := s.status("GET", "", "", map[string]string{"Authorization": "Bearer secret", "Host": "evil.example"}); st != 403 {
			t.Errorf("a foreign Host: %d", st)
		}
	})
	expectMoved(t, w, one("initialize ok"), func() {
		if st := s.status("POST", "", httpInit, map[string]string{"Authorization": "Bearer secret"}); st != 200 {
			t.Errorf("with the token: %d", st)
		}
	})
}

// The session limit — every session with a request in flight, nothing
// to evict — and the endpoint's shutdown refuse an initialize, and the
// limit a subscriptions/listen: each counts once, as unavailable.
func TestHTTPLimitRefusalsCounted(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE"}}`)
	s := gatewayHTTP(t, w.gw.Aggregate(), HTTPOptions{MaxSessions: 1})
	sid := s.initialize()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", s.url, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x__sleep","arguments":{"ms":60000}}}`))
		req.Header.Set("Accept", httpAccept)
		req.Header.Set("Mcp-Session-Id", sid)
		if resp, err := s.srv.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, "the session's call to be in flight", func() bool { return activeOf(s.h, sid) == 1 })
	expectMoved(t, w, one("initialize unavailable"), func() {
		if st := s.status("POST", "", httpInit, nil); st != 503 {
			t.Errorf("initialize beyond the limit: %d", st)
		}
	})
	expectMoved(t, w, one("subscriptions/listen unavailable"), func() {
		resp, b := postModern(t, s.url, `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},`+modernMeta(`{}`)+`}}`, "subscriptions/listen", "")
		if resp.StatusCode != 503 {
			t.Errorf("listen beyond the limit: %d %s", resp.StatusCode, b)
		}
	})
	s.h.Close()
	expectMoved(t, w, one("initialize unavailable"), func() {
		if st := s.status("POST", "", httpInit, nil); st != 503 {
			t.Errorf("initialize after Close: %d", st)
		}
	})
}

// A body that does not arrive within BodyTimeout, or that cannot be
// read, is refused and counted once.
func TestHTTPBodyRefusalsCounted(t *testing.T) {
	w := newWorld(t, `{}`)
	s := gatewayHTTP(t, w.gw.Aggregate(), HTTPOptions{BodyTimeout: 100 * time.Millisecond})
	sid := s.initialize()
	expectMoved(t, w, one("_OTHER protocol_error"), func() {
		conn := s.rawPOST(sid, 100, `{"jsonrpc":"2.0",`)
		if resp, _ := readRawResponse(t, conn, 10*time.Second); resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("a body that stops: %d", resp.StatusCode)
		}
	})
	expectMoved(t, w, one("_OTHER protocol_error"), func() {
		r := httptest.NewRequest("POST", "/", io.MultiReader(strings.NewReader(`{"jsonrpc":`), errReader{}))
		r.Header.Set("Accept", httpAccept)
		r.Header.Set("Mcp-Session-Id", sid)
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, r)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("a body that cannot be read: %d", rec.Code)
		}
	})
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// A modern tools/call whose Mcp-Param headers do not match its arguments
// is refused and counted once, on the aggregated endpoint and on the
// server's own; one whose tool schema cannot be learned, as unavailable.
func TestHTTPParamHeaderRefusalsCounted(t *testing.T) {
	mw := newMRTRWorld(t)
	single := gatewayHTTP(t, mw.gw.Single("c"), HTTPOptions{})
	for _, url := range []string{mw.url, single.url} {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_x_mcp_header","arguments":{"region":"us-west1"},` + modernMeta(`{}`) + `}}`
		// The tool list learned first, so that the count is the refusal's alone.
		resp, b := postModern(t, url, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+modernMeta(`{}`)+`}}`, "tools/list", "")
		if resp.StatusCode != 200 {
			t.Fatalf("tools/list: %d %s", resp.StatusCode, b)
		}
		expectMoved(t, mw.world, one("tools/call protocol_error"), func() {
			req, _ := http.NewRequest("POST", url, strings.NewReader(body))
			for k, v := range modernHeaders("tools/call", "test_x_mcp_header") {
				req.Header.Set(k, v)
			}
			req.Header.Set("Mcp-Param-Region", "eu-west1")
			req.Header.Set("Accept", httpAccept)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if m := decodeBody(t, resp); resp.StatusCode != 400 || m.Error == nil || m.Error.Code != rpc.HeaderMismatch {
				t.Errorf("a mismatched Mcp-Param header: %d %s", resp.StatusCode, m.Encode())
			}
		})
	}

	w := newWorld(t, `{"x":{"command":"/nonexistent/mcp-server","restart":{"policy":"never"}}}`)
	s := gatewayHTTP(t, w.gw.Single("x"), HTTPOptions{})
	expectMoved(t, w, one("tools/call unavailable"), func() {
		resp, b := postModern(t, s.url, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},`+modernMeta(`{}`)+`}}`, "tools/call", "echo")
		if m, err := rpc.Decode(b); err != nil || m.Error == nil || m.Error.Code != rpc.BackendUnavailable {
			t.Errorf("a tool schema that cannot be learned: %d %s", resp.StatusCode, b)
		}
	})
}

// Every line the stdio front refuses before its endpoint sees it counts
// once, as the HTTP front's POSTs do.
func TestStdioRefusalsCounted(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	c := newStdioTestClientOn(t, w.gw.Aggregate())
	// ping answers after every line before it was dealt with: a line of
	// the connection is handled (and counted) in order.
	n := 100
	ping := func() {
		t.Helper()
		n++
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, n))
		for {
			l := c.next()
			if strings.Contains(l, fmt.Sprintf(`"id":%d,`, n)) || strings.Contains(l, fmt.Sprintf(`"id":%d}`, n)) {
				if !strings.Contains(l, `"result"`) {
					t.Fatalf("ping: %s", l)
				}
				return
			}
		}
	}
	// refused sends line and, if reply, reads the refusal, then pings.
	refused := func(line string, reply bool) {
		t.Helper()
		c.send(line)
		if reply {
			if l := c.next(); !strings.Contains(l, `"error"`) {
				t.Fatalf("%s: %s", line, l)
			}
		}
		ping()
	}
	meta := modernMeta(`{}`)
	withPing := func(key string) map[string]uint64 { return map[string]uint64{key: 1, "ping ok": 1} }
	for _, tc := range []struct {
		name, line string
		reply      bool
		want       map[string]uint64
	}{
		{"not JSON", `{"jsonrpc":"2.0","id":`, false, withPing("_OTHER protocol_error")},
		{"not JSON-RPC", `{"jsonrpc":"1.0","id":5,"method":"ping"}`, true, withPing("_OTHER protocol_error")},
		{"batch before initialize", `[{"jsonrpc":"2.0","id":6,"method":"ping"}]`, true, withPing("_OTHER protocol_error")},
		{"modern without capabilities", `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, true, withPing("tools/list protocol_error")},
		{"modern unsupported version", `{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2027-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}`, true, withPing("tools/list protocol_error")},
		{"modern made-up method, bad _meta", `{"jsonrpc":"2.0","id":9,"method":"x/y","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":1}}}`, true, withPing("_OTHER protocol_error")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectMoved(t, w, tc.want, func() { refused(tc.line, tc.reply) })
		})
	}

	t.Run("line too long", func(t *testing.T) {
		expectMoved(t, w, withPing("_OTHER protocol_error"), func() {
			refused(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"x":"`+strings.Repeat("x", rpc.DefaultMaxLine)+`"}}`, true)
		})
	})

	t.Run("duplicate id in flight", func(t *testing.T) {
		sleep := `{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"a__sleep","arguments":{"ms":60000},` + meta + `}}`
		c.send(sleep)
		// The fixture starts (its first call): what the refusal moves is
		// compared once the first call is surely in flight — a second
		// sleep with the same id gets the refusal only if it is.
		expectMoved(t, w, withPing("tools/call protocol_error"), func() {
			refused(sleep, true)
		})
		c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"s"}}`)
		if l := c.next(); !strings.Contains(l, `"id":"s"`) {
			t.Fatalf("the cancelled sleep: %s", l)
		}
	})

	// A session at 2025-03-26 may send batches: a refused batch, and the
	// refused elements of one, count once each.
	c.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	if l := c.next(); !strings.Contains(l, `"protocolVersion":"2025-03-26"`) {
		t.Fatalf("initialize: %s", l)
	}
	t.Run("empty batch", func(t *testing.T) {
		expectMoved(t, w, withPing("_OTHER protocol_error"), func() { refused(`[]`, true) })
	})
	t.Run("batch elements", func(t *testing.T) {
		expectMoved(t, w, map[string]uint64{"ping ok": 2, "_OTHER protocol_error": 1, "initialize protocol_error": 1}, func() {
			refused(`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"1.0","id":2},{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}]`, true)
		})
	})
}

// With tracing on, a refusal gets a span as mcpvisor's own answers do —
// named by its method (folded), mcpvisor.local and mcpvisor.refused set —
// and an HTTP refusal without a JSON-RPC message none.
func TestRefusalSpans(t *testing.T) {
	tr, rcv := newTestTracing(t)
	w := newWorld(t, `{}`)
	w.gw.SetTracing(tr)
	s := gatewayHTTP(t, w.gw.Aggregate(), HTTPOptions{})
	for _, r := range []struct {
		method, sid, body string
		hdr               map[string]string
	}{
		{"POST", "nope", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil},
		{"POST", "", `{"jsonrpc":"2.0","id":`, nil},
		{"POST", "", `{"jsonrpc":"2.0","id":"t","method":"tools/list","params":{` + modernMeta(`{}`) + `}}`, modernHeaders("prompts/list", "")},
		{"GET", "nope", "", nil},
		{"PUT", "", "", nil},
	} {
		s.status(r.method, r.sid, r.body, r.hdr)
	}
	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Wait(3, 5*time.Second)
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	byName := map[string]map[string]any{}
	for _, sp := range spans {
		byName[sp.Name] = sp.Attrs
		if sp.Attrs["mcpvisor.local"] != true || sp.Attrs["mcpvisor.refused"] != true || sp.Attrs["mcpvisor.outcome"] != "protocol_error" {
			t.Errorf("span %q: %v", sp.Name, sp.Attrs)
		}
	}
	if a := byName["ping"]; a == nil || a["rpc.response.status_code"] != nil || a["jsonrpc.request.id"] != "1" {
		t.Errorf("the unknown session's ping: %v (a plain 404: no JSON-RPC code)", a)
	}
	if a := byName[telemetry.Other]; a == nil || a["rpc.response.status_code"] != fmt.Sprint(rpc.ParseError) {
		t.Errorf("the parse error: %v", a)
	}
	if a := byName["tools/list"]; a == nil || a["rpc.response.status_code"] != fmt.Sprint(rpc.HeaderMismatch) || a["jsonrpc.request.id"] != "t" {
		t.Errorf("the header mismatch: %v", a)
	}
}

// An endpoint of no gateway (a test's) counts nothing and still refuses.
func TestRefusalWithoutGateway(t *testing.T) {
	if gatewayOf(newHTTPFake()) != nil {
		t.Fatal("a fake endpoint has a gateway")
	}
	s := newHTTPTestServer(t, HTTPOptions{})
	if st := s.status("POST", "nope", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil); st != 404 {
		t.Fatalf("status %d", st)
	}
	var g *Gateway
	g.refuse(context.Background(), nil, json.RawMessage("1"), telemetry.ProtocolError, 0, "")
	g.refusedHTTP(telemetry.RefusedMethod)
}

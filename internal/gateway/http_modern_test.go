package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// modernMeta is the _meta of a modern request with the given client
// capabilities.
func modernMeta(caps string) string {
	return `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":` + caps + `}`
}

// modernHeaders are the headers a modern client sends with method (and
// Mcp-Name name, if not "").
func modernHeaders(method, name string) map[string]string {
	h := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return h
}

// doModern posts a modern request and decodes the one message of the
// reply, checking its HTTP status.
func (s *httpTestServer) doModern(status int, body string, hdr map[string]string) *rpc.Message {
	return s.doModernT(s.t, status, body, hdr)
}

func (s *httpTestServer) doModernT(t *testing.T, status int, body string, hdr map[string]string) *rpc.Message {
	t.Helper()
	resp := s.do("POST", "", body, hdr)
	if resp.StatusCode != status {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s: HTTP %d, want %d: %s", body, resp.StatusCode, status, b)
	}
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		t.Fatalf("a modern reply carries Mcp-Session-Id %q", sid)
	}
	return decodeBody(t, resp)
}

// A modern request is served without a session: its result carries
// resultType, a list's ttlMs and cacheScope; server/discover answers; a
// legacy session works on the same endpoint meanwhile.
func TestHTTPModernServed(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initialize()

	m := s.doModern(200, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},`+modernMeta(`{}`)+`}}`,
		modernHeaders("tools/call", "echo"))
	var res struct {
		ResultType string `json:"resultType"`
		Content    []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if string(m.ID) != "7" || json.Unmarshal(m.Result, &res) != nil || res.ResultType != "complete" || len(res.Content) != 1 || res.Content[0].Text != "hi" {
		t.Fatalf("tools/call: %s", m.Encode())
	}

	m = s.doModern(200, `{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{`+modernMeta(`{}`)+`}}`, modernHeaders("tools/list", ""))
	var list struct {
		ResultType string          `json:"resultType"`
		TTL        *int            `json:"ttlMs"`
		Scope      string          `json:"cacheScope"`
		Tools      json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(m.Result, &list) != nil || list.ResultType != "complete" || list.TTL == nil || *list.TTL != 0 || list.Scope != "public" || len(list.Tools) < 10 {
		t.Fatalf("tools/list: %s", m.Encode())
	}

	m = s.doModern(200, `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+modernMeta(`{}`)+`}}`, modernHeaders("server/discover", ""))
	var disc struct {
		Supported []string                   `json:"supportedVersions"`
		Caps      map[string]json.RawMessage `json:"capabilities"`
		Meta      map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(m.Result, &disc) != nil || len(disc.Supported) == 0 || disc.Supported[0] != "2026-07-28" || disc.Caps["tools"] == nil ||
		disc.Meta["io.modelcontextprotocol/serverInfo"] == nil {
		t.Fatalf("server/discover: %s", m.Encode())
	}

	// The legacy session still answers, and the fake saw each modern
	// request's own _meta.
	if m := decodeBody(t, s.do("POST", sid, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, nil)); string(m.Result) != "{}" {
		t.Fatalf("legacy ping: %s", m.Encode())
	}
	s.fake.mu.Lock()
	n := len(s.fake.modern)
	first := s.fake.modern[0]
	s.fake.mu.Unlock()
	if n != 3 || first.Version != "2026-07-28" || string(first.Caps) != "{}" || !strings.Contains(string(first.ClientInfo), `"t"`) {
		t.Fatalf("the endpoint saw %d modern requests, the first %+v", n, first)
	}
}

// Every malformed modern request gets the error the transport page names,
// with its HTTP status and the request's id, and reaches no endpoint.
func TestHTTPModernRefused(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	call := func(meta string) string {
		return `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{}` + meta + `}}`
	}
	b64 := "=?base64?" + base64.StdEncoding.EncodeToString([]byte("echo")) + "?="
	for _, tc := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		code   int
		says   string
	}{
		{"no _meta", call(""), modernHeaders("tools/call", "echo"), 400, rpc.InvalidParams, "_meta"},
		{"no protocolVersion", call(`,"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}`), modernHeaders("tools/call", "echo"), 400, rpc.InvalidParams, "protocolVersion"},
		{"no clientCapabilities", call(`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`), modernHeaders("tools/call", "echo"), 400, rpc.InvalidParams, "clientCapabilities"},
		{"bad log level", call(`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"loud"}`), modernHeaders("tools/call", "echo"), 400, rpc.InvalidParams, "log level"},
		{"version header differs", call(`,` + strings.Replace(modernMeta(`{}`), "2026-07-28", "2099-01-01", 1)), modernHeaders("tools/call", "echo"), 400, rpc.HeaderMismatch, "2099-01-01"},
		{"no version header", call(`,` + modernMeta(`{}`)), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo"}, 400, rpc.HeaderMismatch, "MCP-Protocol-Version"},
		{"no Mcp-Method", call(`,` + modernMeta(`{}`)), map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Name": "echo"}, 400, rpc.HeaderMismatch, "Mcp-Method"},
		{"Mcp-Method differs", call(`,` + modernMeta(`{}`)), modernHeaders("tools/list", "echo"), 400, rpc.HeaderMismatch, "tools/list"},
		{"no Mcp-Name", call(`,` + modernMeta(`{}`)), modernHeaders("tools/call", ""), 400, rpc.HeaderMismatch, "Mcp-Name"},
		{"Mcp-Name differs", call(`,` + modernMeta(`{}`)), modernHeaders("tools/call", "progress"), 400, rpc.HeaderMismatch, "progress"},
		{"Mcp-Name bad Base64", call(`,` + modernMeta(`{}`)), modernHeaders("tools/call", "=?base64?!!!?="), 400, rpc.HeaderMismatch, "Base64"},
		{"unknown version", call(`,` + strings.Replace(modernMeta(`{}`), "2026-07-28", "2099-01-01", 1)),
			map[string]string{"MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}, 400, rpc.UnsupportedProtocolVersion, "2099-01-01"},
		{"legacy version in _meta, no header", call(`,` + strings.Replace(modernMeta(`{}`), "2026-07-28", "2025-11-25", 1)), nil, 400, rpc.HeaderMismatch, "MCP-Protocol-Version"},
		{"unknown method", `{"jsonrpc":"2.0","id":5,"method":"no/such","params":{` + modernMeta(`{}`) + `}}`, modernHeaders("no/such", ""), 404, rpc.MethodNotFound, "no/such"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(s.fakeModern())
			m := s.doModernT(t, tc.status, tc.body, tc.hdr)
			if string(m.ID) != "5" || m.Error == nil || m.Error.Code != tc.code || !strings.Contains(m.Error.Message, tc.says) {
				t.Fatalf("reply %s, want error %d naming %q", m.Encode(), tc.code, tc.says)
			}
			if tc.code == rpc.UnsupportedProtocolVersion {
				var d struct {
					Supported []string `json:"supported"`
					Requested string   `json:"requested"`
				}
				if json.Unmarshal(m.Error.Data, &d) != nil || len(d.Supported) == 0 || d.Supported[0] != "2026-07-28" || d.Requested == "" {
					t.Fatalf("error data %s", m.Error.Data)
				}
			}
			if tc.status == 400 && len(s.fakeModern()) != before {
				t.Fatal("a refused request reached the endpoint")
			}
		})
	}

	// Base64 sentinel names are decoded before they are compared.
	m := s.doModern(200, call(`,`+modernMeta(`{}`)), modernHeaders("tools/call", b64))
	if m.Error != nil {
		t.Fatalf("Base64 Mcp-Name: %s", m.Encode())
	}

	// A modern notification is accepted; GET and DELETE are not part of
	// the revision.
	if resp := s.do("POST", "", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, modernHeaders("notifications/cancelled", "")); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("modern notification: HTTP %d", resp.StatusCode)
	}
	for _, method := range []string{"GET", "DELETE"} {
		resp := s.do(method, "", "", map[string]string{"MCP-Protocol-Version": "2026-07-28"})
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
			t.Fatalf("modern %s: HTTP %d, Allow %q", method, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
}

func (s *httpTestServer) fakeModern() []*Modern {
	s.fake.mu.Lock()
	defer s.fake.mu.Unlock()
	return append([]*Modern(nil), s.fake.modern...)
}

// A modern request's progress comes on its own event stream, without
// event ids (the revision has no resumption).
func TestHTTPModernStreamHasNoEventIDs(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	resp := s.do("POST", "", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"progress","arguments":{},"_meta":{"progressToken":"p",`+
		strings.TrimPrefix(modernMeta(`{}`), `"_meta":{`)+`}}`, modernHeaders("tools/call", "progress"))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || strings.Count(string(b), "notifications/progress") != 3 || !strings.Contains(string(b), `"resultType":"complete"`) {
		t.Fatalf("stream %d %q:\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	r := newSSEReader(bytes.NewReader(b))
	for {
		if _, err := r.next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("stream %q: %v", b, err)
		}
	}
	if id, sent := r.lastID(); sent {
		t.Fatalf("a modern stream carries event ids (%q):\n%s", id, b)
	}
}

// Close ends the 2026-07-28 requests in flight — they have no session for
// it to close — each answered with its error, and none stays registered.
// A request that comes after Close is ended as it begins.
func TestHTTPModernRequestsEndAtClose(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	const n = 20
	s.fake.blocked = make(chan struct{}, n+1)
	s.fake.cancelled = make(chan struct{}, n+1)
	done := make(chan *rpc.Message, n)
	for i := range n {
		go func() {
			body := `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"tools/call","params":{"name":"block",` + modernMeta(`{}`) + `}}`
			resp := s.do("POST", "", body, modernHeaders("tools/call", "block"))
			done <- decodeBody(t, resp)
		}()
	}
	for range n {
		<-s.fake.blocked // every request is in flight
	}
	s.h.Close()
	for range n {
		select {
		case m := <-done:
			if m.Error == nil {
				t.Fatalf("a request ended by Close: %s", m.Encode())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a modern request outlived Close")
		}
	}
	for i := range s.h.modern {
		if len(s.h.modern[i].m) != 0 {
			t.Fatalf("shard %d still tracks %d requests", i, len(s.h.modern[i].m))
		}
	}
	m := s.doModern(200, `{"jsonrpc":"2.0","id":"late","method":"tools/call","params":{"name":"block",`+modernMeta(`{}`)+`}}`, modernHeaders("tools/call", "block"))
	if m.Error == nil {
		t.Fatalf("after Close: %s", m.Encode())
	}
}

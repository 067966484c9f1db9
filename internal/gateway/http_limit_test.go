package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A session beyond a per-session server's maxInstances gets HTTP 503 with
// a JSON-RPC error that names the limit, and no new process.
func TestHTTPInstanceLimitIs503(t *testing.T) {
	w := newWorld(t, `{"p":{"command":"$FIXTURE","sharing":"per-session","maxInstances":1}}`)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	post := func(sid, body string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	session := func() string {
		resp, _ := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
		sid := resp.Header.Get("Mcp-Session-Id")
		if sid == "" {
			t.Fatalf("initialize: %d", resp.StatusCode)
		}
		return sid
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"p__echo","arguments":{"text":"x"}}}`
	if resp, body := post(session(), call); resp.StatusCode != 200 || !strings.Contains(body, `"x"`) {
		t.Fatalf("first session: %d %s", resp.StatusCode, body)
	}
	resp, body := post(session(), call)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second session beyond maxInstances 1: HTTP %d %s, want 503", resp.StatusCode, body)
	}
	var m rpc.Message
	if err := json.Unmarshal([]byte(body), &m); err != nil || m.Error == nil || m.Error.Code != rpc.LimitReached || !strings.Contains(m.Error.Message, "maxInstances 1") {
		t.Fatalf("second session: %s, want a JSON-RPC error naming maxInstances 1", body)
	}
	if n := w.fleet.Get("p").Status().Sessions; n != 1 {
		t.Fatalf("%d instances, want 1", n)
	}
}

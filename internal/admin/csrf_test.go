package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A page of another origin on this machine (any loopback port passes the
// guard's Origin check, for browser MCP clients of /mcp) cannot act on the
// fleet through the API — approve held tool definitions, restart, stop,
// sleep, reload — with a simple cross-origin POST: every POST under /api/
// that carries an Origin must come from the listener's own origin. The
// dashboard (same origin) and the CLI (no Origin) are served as before.
func TestAPIPostsRefuseOtherOrigins(t *testing.T) {
	srv := httptest.NewServer(New(testFleet(t), nil, Options{}))
	defer srv.Close()
	post := func(path, origin string) (int, string) {
		req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/plain")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/api/servers/a/approve", "/api/servers/a/stop", "/api/servers/a/sleep", "/api/reload"} {
		if code, body := post(path, "http://localhost:5173"); code != http.StatusForbidden || !strings.Contains(body, "origin") {
			t.Errorf("POST %s from another loopback origin: %d %s, want 403 naming the origin", path, code, body)
		}
	}
	// The listener's own origin, and no Origin (the CLI), reach the route.
	if code, body := post("/api/servers/nosuch/stop", srv.URL); code != http.StatusNotFound {
		t.Errorf("POST from the listener's own origin: %d %s, want the route's 404", code, body)
	}
	if code, body := post("/api/servers/nosuch/stop", ""); code != http.StatusNotFound {
		t.Errorf("POST without an Origin: %d %s, want the route's 404", code, body)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// Every route of mcpvisor serve applies the same Host, Origin and token
// checks.
func TestServeGuardsEveryRoute(t *testing.T) {
	fixture := testserver.Build(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"a":{"command":%q}}}`, fixture), "--no-learn", "--token-file", tokenFile)
	stopAtCleanup(t, s)

	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	routes := []struct{ method, path, accept, body string }{
		{"POST", "/mcp", "application/json, text/event-stream", initialize},
		{"POST", "/servers/a/mcp", "application/json, text/event-stream", initialize},
		{"GET", "/api/servers", "", ""},
		{"GET", "/api/events", "", ""},
		{"GET", "/api/events", "text/event-stream", ""},
		{"GET", "/metrics", "", ""},
		{"GET", "/healthz", "", ""},
		{"GET", "/no/such/path", "", ""}, // 404 once allowed
	}
	cases := []struct {
		name         string
		auth, origin string
		host         string
		status       int
	}{
		{"Bearer", "Bearer s3cret", "", "", 200},
		{"bearer", "bearer s3cret", "", "", 200},
		{"no token", "", "", "", 401},
		{"wrong token", "Bearer s3cret2", "", "", 401},
		{"bad Host", "Bearer s3cret", "", "evil.example", 403},
		{"foreign Origin", "Bearer s3cret", "http://evil.example", "", 403},
	}
	for _, rt := range routes {
		for _, c := range cases {
			req, _ := http.NewRequest(rt.method, s.base+rt.path, strings.NewReader(rt.body))
			if rt.accept != "" {
				req.Header.Set("Accept", rt.accept)
			}
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			if c.origin != "" {
				req.Header.Set("Origin", c.origin)
			}
			if c.host != "" {
				req.Host = c.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := c.status
			if want == 200 && rt.path == "/no/such/path" {
				want = 404
			}
			if resp.StatusCode != want {
				t.Errorf("%s %s (%s) %s: %d, want %d", rt.method, rt.path, rt.accept, c.name, resp.StatusCode, want)
			}
		}
	}
}

// The event history outlives mcpvisor: a restarted serve lists the events
// of the run before, down to those of its shutdown.
func TestServeEventHistorySurvivesRestart(t *testing.T) {
	fixture := testserver.Build(t)
	config := fmt.Sprintf(`{"mcpServers":{"a":{"command":%q}}}`, fixture)
	state := filepath.Join(t.TempDir(), "state")
	events := func(base string) []admin.Entry {
		t.Helper()
		resp, err := http.Get(base + "/api/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct{ Events []admin.Entry }
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		return list.Events
	}

	first := startServe(t, config, "--no-learn", "--state-dir", state)
	sess := connectHTTP(t, first.base+"/mcp", nil)
	if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	sess.Close()
	before := events(first.base)
	if len(before) == 0 {
		t.Fatal("no events in the first run")
	}
	sent := time.Now()
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	if code, _ := first.exit(t, sent, 10*time.Second); code != 0 {
		t.Fatalf("first run exited with %d", code)
	}

	second := startServe(t, config, "--no-learn", "--state-dir", state)
	stopAtCleanup(t, second)
	after := events(second.base)
	seen := map[string]admin.Entry{}
	for _, e := range after {
		seen[e.ID] = e
	}
	for _, e := range before {
		if got, ok := seen[e.ID]; !ok || got.Type != e.Type || got.Server != e.Server {
			t.Fatalf("event %s (%s %s) of the first run is not listed after the restart: %+v", e.ID, e.Server, e.Type, after)
		}
	}
	stopped := false
	for _, e := range after {
		stopped = stopped || (e.Server == "a" && e.Type == "stopped")
	}
	if !stopped {
		t.Fatalf("the first run's shutdown events were not kept: %+v", after)
	}
}

package admin

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
)

// Every admin route applies the same Host, Origin and bearer-token checks
// as /mcp.
func TestEveryRouteIsGuarded(t *testing.T) {
	log := NewEventLog(4)
	log.Add(fleet.Event{Server: "a", Type: "started"})
	defer log.Close()
	logs := logbuf.New(logbuf.Options{})
	srv := httptest.NewServer(New(testFleet(t), log, Options{Access: guard.Options{Token: "s3cret"}, Logs: func(string) *logbuf.Buffer { return logs }}))
	defer srv.Close()

	routes := []struct {
		name string
		path string
		hdr  []string
	}{
		{"servers", "/api/servers", nil},
		{"server detail", "/api/servers/a", nil},
		{"server tools", "/api/servers/a/tools", nil},
		{"server logs", "/api/servers/a/logs", nil},
		{"server log stream", "/api/servers/a/logs?follow=1", nil},
		{"events", "/api/events", nil},
		{"event stream", "/api/events", []string{"Accept", "text/event-stream"}},
		{"metrics", "/metrics", nil},
	}
	cases := []struct {
		name   string
		hdr    []string
		host   string
		status int
	}{
		{"Bearer", []string{"Authorization", "Bearer s3cret"}, "", http.StatusOK},
		{"bearer lowercase", []string{"Authorization", "bearer s3cret"}, "", http.StatusOK},
		{"BEARER uppercase", []string{"Authorization", "BEARER s3cret"}, "", http.StatusOK},
		{"no token", nil, "", http.StatusUnauthorized},
		{"wrong token", []string{"Authorization", "Bearer s3cret2"}, "", http.StatusUnauthorized},
		{"token prefix", []string{"Authorization", "Bearer s3cre"}, "", http.StatusUnauthorized},
		{"other scheme", []string{"Authorization", "Basic czNjcmV0"}, "", http.StatusUnauthorized},
		{"bad Host", []string{"Authorization", "Bearer s3cret"}, "evil.example", http.StatusForbidden},
		{"foreign Origin", []string{"Authorization", "Bearer s3cret", "Origin", "http://evil.example"}, "", http.StatusForbidden},
		{"null Origin", []string{"Authorization", "Bearer s3cret", "Origin", "null"}, "", http.StatusForbidden},
		{"loopback Origin", []string{"Authorization", "Bearer s3cret", "Origin", "http://localhost:5173"}, "", http.StatusOK},
	}
	for _, rt := range routes {
		for _, c := range cases {
			t.Run(rt.name+"/"+c.name, func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+rt.path, nil)
				hdr := append(append([]string{}, rt.hdr...), c.hdr...)
				for i := 0; i+1 < len(hdr); i += 2 {
					req.Header.Set(hdr[i], hdr[i+1])
				}
				if c.host != "" {
					req.Host = c.host
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close() // a live stream ends with its connection
				if resp.StatusCode != c.status {
					t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
				}
				if c.status == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			})
		}
	}
}

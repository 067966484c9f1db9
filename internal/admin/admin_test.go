package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

func testFleet(t *testing.T) *fleet.Fleet {
	cfg, err := config.Parse([]byte(`{"mcpServers":{"a":{"command":"x"},"b":{"command":"y"},"off":{"command":"z","disabled":true}}}`), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.New(cfg, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestServersAndAuth(t *testing.T) {
	log := NewEventLog(2)
	for _, typ := range []string{"started", "dormant", "respawned"} {
		log.Add(fleet.Event{Server: "a", Type: typ})
	}
	srv := httptest.NewServer(New(testFleet(t), log, Options{Token: "secret"}))
	defer srv.Close()

	get := func(path, token string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := get("/api/servers", ""); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", r.StatusCode)
	}
	if r := get("/api/servers", "wrong"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", r.StatusCode)
	}
	r := get("/api/servers", "secret")
	var body Servers
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.StatusCode != 200 {
		t.Fatalf("servers: %d %v", r.StatusCode, err)
	}
	if body.Totals.Total != 2 || body.Totals.ByState["new"] != 2 || body.Totals.Active != 0 || len(body.Servers) != 2 || body.Servers[0].Name != "a" {
		t.Fatalf("body %+v", body)
	}
	r = get("/api/events", "secret")
	var ev struct{ Events []fleet.Event }
	json.NewDecoder(r.Body).Decode(&ev)
	if len(ev.Events) != 2 || ev.Events[1].Type != "respawned" || log.Count("a", "dormant") != 1 {
		t.Fatalf("events kept: %+v", ev.Events)
	}
}

func TestDNSRebindingRefused(t *testing.T) {
	srv := httptest.NewServer(New(testFleet(t), nil, Options{}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/servers", nil)
	req.Host = "evil.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign Host on loopback: %d", resp.StatusCode)
	}
}

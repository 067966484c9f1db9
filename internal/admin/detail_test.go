package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

func getJSON(t *testing.T, url string, status int, v any) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s %s, want %d JSON", url, resp.StatusCode, resp.Header.Get("Content-Type"), b, status)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, b)
		}
	}
	return string(b)
}

// A server's detail says how it is configured with every secret hidden —
// values of env and headers never, secret-looking arguments redacted —
// and what is known of it; an unknown name is a 404 naming the servers.
func TestServerDetail(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"mcpServers":{
		"a":{"command":"npx","args":["-y","@scope/server","--api-key","sk-live-0123456789abcdefghijklmnop"],"env":{"GITHUB_TOKEN":"ghp_supersecretvalue0123456789abcdefgh","PLAIN":"x"},"sharing":"per-session","protocol":"legacy"},
		"r":{"url":"https://example.com/mcp?token=abcdef0123456789abcdef0123456789","headers":{"Authorization":"Bearer hunter2hunter2"}}}}`), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.New(cfg, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int{"a": 2}
	srv := httptest.NewServer(New(f, nil, Options{HeldCalls: func() map[string]int { return held }}))
	defer srv.Close()

	var d Detail
	body := getJSON(t, srv.URL+"/api/servers/a", http.StatusOK, &d)
	for _, secret := range []string{"sk-live", "ghp_", "supersecret"} {
		if strings.Contains(body, secret) {
			t.Errorf("detail shows a secret (%s): %s", secret, body)
		}
	}
	if d.Name != "a" || d.State != "new" || d.Kind != config.KindStdio || d.Sharing != config.SharingPerSession || d.Protocol != config.ProtocolLegacy ||
		d.HeldCalls != 2 || d.Era != "" || len(d.Lists) != 0 || !strings.HasPrefix(d.Launch, "npx -y @scope/server --api-key "+config.Redaction) ||
		strings.Join(d.EnvNames, ",") != "GITHUB_TOKEN,PLAIN" {
		t.Errorf("detail: %+v", d)
	}

	body = getJSON(t, srv.URL+"/api/servers/r", http.StatusOK, &d)
	if strings.Contains(body, "hunter2") || strings.Contains(body, "abcdef0123456789") || strings.Join(d.HeaderNames, ",") != "Authorization" || d.Kind != config.KindHTTP {
		t.Errorf("remote detail: %s", body)
	}

	var e struct{ Error string }
	getJSON(t, srv.URL+"/api/servers/nope", http.StatusNotFound, &e)
	if e.Error != `no server named "nope"; configured: a, r` {
		t.Errorf("404: %q", e.Error)
	}
	getJSON(t, srv.URL+"/api/servers/nope/tools", http.StatusNotFound, &e)

	// Never started: nothing learned, and nothing started to learn it.
	var tl Tools
	getJSON(t, srv.URL+"/api/servers/a/tools", http.StatusOK, &tl)
	if tl.Server != "a" || tl.Learned || tl.Tools == nil || len(tl.Tools) != 0 {
		t.Errorf("tools of a never-started server: %+v", tl)
	}
	if st := f.Get("a").Status(); st.Spawns != 0 || st.State != "new" {
		t.Errorf("asking for the tools started the server: %+v", st)
	}
}

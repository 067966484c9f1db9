package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
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

// liveSession is a connection that stays up until closed.
type liveSession struct {
	done chan struct{}
	once sync.Once
}

func (l *liveSession) Wait() error { <-l.done; return nil }
func (l *liveSession) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}
func (l *liveSession) Alive() bool {
	select {
	case <-l.done:
		return false
	default:
		return true
	}
}
func (l *liveSession) Done() <-chan struct{} { return l.done }

type liveConnector struct {
	onConnect func(context.Context, fleet.Live)
}

func (c liveConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	l := &liveSession{done: make(chan struct{})}
	c.onConnect(ctx, l)
	return l, nil
}

// liveFleet is a fleet of the servers of cfg (an mcpServers object's
// members) whose sessions connect at once and hold no process.
func liveFleet(t *testing.T, servers string) *fleet.Fleet {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"mcpServers":{`+servers+`}}`), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.New(cfg, fleet.Options{
		Logger: slog.New(slog.DiscardHandler),
		Connector: func(_ *config.Server, _ backend.Hooks, onConnect func(context.Context, fleet.Live)) lifecycle.Connector {
			return liveConnector{onConnect}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(context.Background()) })
	return f
}

// A stdio server's detail lists the containment layers its processes run
// under, as the API was given them, and its instances: a per-session
// server's shared one and one per client session, labelled by a
// fingerprint that never shows the session id. An http server's detail
// has no layers and says it has no local process.
func TestServerDetailContainmentAndInstances(t *testing.T) {
	f := liveFleet(t, `"p":{"command":"p","sharing":"per-session","idleTimeout":"0"},
		"r":{"url":"https://example.com/mcp"}`)
	sessions := []string{"", "0d9e6c1f-first-session-credential", "7a41b2e8-second-session-credential"}
	for _, id := range sessions {
		l, err := f.Get("p").Acquire(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
	}
	layers := []proc.Layer{
		{Name: proc.LayerProcessGroup, Active: true, Detail: "each server leads its own process group"},
		{Name: proc.LayerPIDNamespace, Active: false, Detail: "unprivileged user namespaces are disabled"},
	}
	srv := httptest.NewServer(New(f, nil, Options{Containment: layers}))
	defer srv.Close()

	var d Detail
	getJSON(t, srv.URL+"/api/servers/p", http.StatusOK, &d)
	if !reflect.DeepEqual(d.Containment, layers) || d.NoLocalProcess != "" {
		t.Errorf("containment of a stdio server: %+v, %q; want %+v", d.Containment, d.NoLocalProcess, layers)
	}
	if len(d.Instances) != 3 || !d.Instances[0].Shared || d.Instances[0].State != "running" {
		t.Fatalf("instances: %+v, want the shared one and two sessions'", d.Instances)
	}
	labels := map[string]bool{}
	for _, in := range d.Instances[1:] {
		if in.Shared || in.State != "running" || in.Spawns != 1 {
			t.Errorf("session instance: %+v", in)
		}
		labels[in.Session] = true
	}
	if len(labels) != 2 || !labels[sessions[1]] || !labels[sessions[2]] {
		t.Errorf("instance sessions %v, want %s and %s", labels, sessions[1], sessions[2])
	}

	body := getJSON(t, srv.URL+"/api/servers/r", http.StatusOK, &d)
	if d.Containment == nil || len(d.Containment) != 0 || !strings.Contains(body, `"containment": []`) ||
		!strings.Contains(d.NoLocalProcess, "no local process") {
		t.Errorf("containment of an http server: %s", body)
	}
	if len(d.Instances) != 1 || !d.Instances[0].Shared || d.Instances[0].PID != 0 {
		t.Errorf("instances of an http server: %+v", d.Instances)
	}
}

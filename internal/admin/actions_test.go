package admin

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/launch"
)

// resolverFunc is a launch.PackageResolver answering with a function.
type resolverFunc func(*launch.Form) (*launch.Resolution, error)

func (r resolverFunc) Resolve(_ context.Context, f *launch.Form, _ string, _ []string, _ string) (*launch.Resolution, error) {
	return r(f)
}

// The action routes answer bad requests with the status that says what is
// wrong, without acting: a bad ?timeout= names the parameter (400), an
// unknown action or server is a 404, a sleep of a server not running or
// stopped a 409 that says so, so is a refresh of a server with no package
// launcher, a reload without a reloader a 404,
// a GET is not an action (405); a rejected reload is a 422 with the
// reloader's report, an applied one a 200, and the reloader's context
// carries the ?timeout= bound.
func TestActionRoutes(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"mcpServers":{"a":{"command":"x"}}}`), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.New(cfg, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	post := func(h http.Handler, path string) (int, string) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		resp, err := http.Post(srv.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	plain := New(f, nil, Options{})
	for _, c := range []struct {
		path   string
		status int
		says   string
	}{
		{"/api/servers/a/restart?timeout=soon", 400, "timeout"},
		{"/api/servers/a/restart?timeout=-1s", 400, "timeout"},
		{"/api/servers/a/explode", 404, "restart, stop, start, sleep or refresh"},
		{"/api/servers/a/refresh", 409, "server a runs x, not a package launcher (npx, npm exec, pnpm dlx, bunx, yarn dlx): no package launcher to resolve"},
		{"/api/servers/a/sleep", 409, "server a is new, not running: there is no process to put to sleep"},
		{"/api/servers/nope/stop", 404, `no server named \"nope\"`},
		{"/api/reload", 404, "does not reload"},
	} {
		if status, body := post(plain, c.path); status != c.status || !strings.Contains(body, c.says) {
			t.Errorf("POST %s: %d %s, want %d saying %s", c.path, status, body, c.status, c.says)
		}
	}
	if st := f.Get("a").Status(); st.State != "new" || st.Refusing != "" {
		t.Fatalf("a bad request acted: %+v", st)
	}
	// A refresh resolves the launcher again and answers how the server
	// starts from now on.
	ncfg, err := config.Parse([]byte(`{"mcpServers":{"n":{"command":"npx","args":["-y","@fx/server"]}}}`), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resolver := resolverFunc(func(f *launch.Form) (*launch.Resolution, error) {
		return &launch.Resolution{Launcher: f.Launcher, Command: "/usr/bin/node", Args: []string{"/x/index.js"}, Package: "@fx/server", Version: "1.2.3", Files: []string{"/usr/bin/node"}}, nil
	})
	nf, err := fleet.New(ncfg, fleet.Options{Resolver: resolver})
	if err != nil {
		t.Fatal(err)
	}
	status, body := post(New(nf, nil, Options{}), "/api/servers/n/refresh")
	if status != 200 || !strings.Contains(body, `"runs": "npx → node …/server@1.2.3"`) || !strings.Contains(body, `"flattened": true`) {
		t.Errorf("refresh: %d %s", status, body)
	}
	if status, body := post(plain, "/api/servers/a/stop"); status != 200 {
		t.Fatalf("stop: %d %s", status, body)
	}
	if status, body := post(plain, "/api/servers/a/sleep"); status != 409 || !strings.Contains(body, "stopped by the operator") || !strings.Contains(body, `"action": "sleep"`) {
		t.Errorf("sleep of a stopped server: %d %s, want 409 saying it was stopped", status, body)
	}
	srv := httptest.NewServer(plain)
	resp, err := http.Get(srv.URL + "/api/servers/a/restart")
	srv.Close()
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action: %d, want 405", resp.StatusCode)
	}

	var bound time.Duration
	applied := false
	reloading := New(f, nil, Options{Reload: func(ctx context.Context) (any, bool) {
		if d, ok := ctx.Deadline(); ok {
			bound = time.Until(d)
		}
		return map[string]bool{"applied": applied}, applied
	}})
	if status, body := post(reloading, "/api/reload?timeout=30s"); status != 422 || !strings.Contains(body, `"applied": false`) {
		t.Errorf("rejected reload: %d %s", status, body)
	}
	if bound <= 0 || bound > 30*time.Second {
		t.Errorf("the reload's bound was %v, want the 30s asked", bound)
	}
	applied = true
	if status, _ := post(reloading, "/api/reload"); status != 200 {
		t.Errorf("applied reload: %d", status)
	}
}

package dashboard

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/authn"
	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/testserver/hydra"
)

const adminScope = "mcpvisor:admin"

// teamStack is a dashboard and an admin route under team identity with a
// real issuer (Hydra): "/api/whoami" answers the request's subject.
type teamStack struct {
	url    string
	team   *guard.Team
	client hydra.Client
}

func newTeamStack(t *testing.T, scopes []string) *teamStack {
	t.Helper()
	h := hydra.Shared(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pub := "http://" + ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := h.CreateClient(ctx, hydra.ClientSpec{GrantTypes: []string{"authorization_code"}, Scopes: scopes,
		RedirectURIs: []string{pub + CallbackPath}, AuthMethod: hydra.AuthNone})
	if err != nil {
		t.Fatal(err)
	}
	v, err := authn.New(authn.Options{Issuer: h.Issuer(), Audiences: []string{pub}})
	if err != nil {
		t.Fatal(err)
	}
	team := &guard.Team{}
	team.Set(&guard.TeamConfig{Verifier: v, PublicURL: pub, Issuer: h.Issuer(), AdminScope: adminScope, DashboardClientID: cl.ID})
	t.Cleanup(func() {
		if c := team.Set(nil); c != nil {
			_ = c.Verifier.Close()
		}
	})
	g := guard.New(guard.Options{Team: team, Route: guard.Route{Admin: true}})
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, identity.FromContext(r.Context()).Subject)
	})
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: New(g, false, g.Wrap(api))}}
	srv.Start()
	t.Cleanup(srv.Close)
	return &teamStack{url: pub, team: team, client: cl}
}

// browser is an HTTP client with a cookie jar that follows redirects, as
// a browser does through the issuer's login and consent.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second}
}

func do(t *testing.T, c *http.Client, method, u string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The dashboard logs in at Hydra (authorization code with PKCE): the
// browser ends on the page with a session cookie — HttpOnly,
// SameSite=Strict, an opaque id, not the token — with which the admin
// API answers; without it, 401; a change needs the public origin;
// logout ends it.
func TestDashboardLoginWithIssuer(t *testing.T) {
	st := newTeamStack(t, []string{adminScope, "offline_access"})
	b := browser(t)
	var setCookies []string
	b.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.Response != nil {
			setCookies = append(setCookies, req.Response.Header.Values("Set-Cookie")...)
		}
		return nil
	}
	code, body := do(t, b, http.MethodGet, st.url+LoginPath+"?login_hint=alice")
	if code != http.StatusOK || !strings.Contains(body, "<!doctype html>") {
		t.Fatalf("login ended with %d: %.300s", code, body)
	}
	var session string
	for _, c := range setCookies {
		if strings.HasPrefix(c, guard.SessionCookie+"=") && !strings.HasPrefix(c, guard.SessionCookie+"=;") {
			session = c
		}
	}
	if session == "" {
		t.Fatalf("no session cookie was set: %q; ended with %d %.400s", setCookies, code, body)
	}
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(session, want) {
			t.Errorf("session cookie %q lacks %s", session, want)
		}
	}
	if v, _, _ := strings.Cut(strings.TrimPrefix(session, guard.SessionCookie+"="), ";"); strings.Count(v, ".") == 2 || len(v) > 64 {
		t.Errorf("the cookie's value looks like a token, not a session id: %q", v)
	}
	if n := st.team.Sessions().Len(); n != 1 {
		t.Errorf("%d sessions held, want 1", n)
	}

	if code, body := do(t, b, http.MethodGet, st.url+"/api/whoami"); code != 200 || body != "alice" {
		t.Errorf("the API with the session: %d %q, want alice", code, body)
	}
	if code, _ := do(t, http.DefaultClient, http.MethodGet, st.url+"/api/whoami"); code != http.StatusUnauthorized {
		t.Errorf("the API without the session: %d, want 401", code)
	}
	if code, _ := do(t, b, http.MethodPost, st.url+"/api/whoami"); code != http.StatusForbidden {
		t.Errorf("a change with the session and no Origin: %d, want 403", code)
	}
	if code, body := do(t, b, http.MethodPost, st.url+"/api/whoami", "Origin", st.url); code != 200 || body != "alice" {
		t.Errorf("a change with the session from the page's origin: %d %q", code, body)
	}
	if code, _, _ := strings.Cut(do2(t, b, st.url+"/ui/auth.json"), "\n"); !strings.Contains(code, `"session":true`) {
		t.Errorf("auth.json with a live session: %s", code)
	}

	if code, _ := do(t, b, http.MethodPost, st.url+LogoutPath); code != http.StatusForbidden {
		t.Errorf("logout without Origin: %d, want 403", code)
	}
	if code, _ := do(t, b, http.MethodPost, st.url+LogoutPath, "Origin", st.url); code != http.StatusNoContent {
		t.Errorf("logout: %d, want 204", code)
	}
	if code, _ := do(t, b, http.MethodGet, st.url+"/api/whoami"); code != http.StatusUnauthorized {
		t.Errorf("the API after logout: %d, want 401", code)
	}
	if n := st.team.Sessions().Len(); n != 0 {
		t.Errorf("%d sessions held after logout, want 0", n)
	}
}

func do2(t *testing.T, c *http.Client, u string) string {
	_, body := do(t, c, http.MethodGet, u)
	return body
}

// A login's callback is single-use and bound to the browser that began
// it: the redirect replayed, or followed in another browser (no binding
// cookie), starts no session.
func TestDashboardCallbackBoundAndSingleUse(t *testing.T) {
	st := newTeamStack(t, []string{adminScope})
	b := browser(t)
	var callback *url.URL
	b.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Path == CallbackPath {
			callback = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}
	do(t, b, http.MethodGet, st.url+LoginPath+"?login_hint=mallory")
	if callback == nil {
		t.Fatal("the issuer did not redirect to the callback")
	}
	other := browser(t)
	if code, body := do(t, other, http.MethodGet, callback.String()); code != http.StatusBadRequest || !strings.Contains(body, "another browser") {
		t.Errorf("callback in another browser: %d %.200s", code, body)
	}
	// That attempt used the flow up: the right browser cannot complete
	// it afterwards either.
	b.CheckRedirect = nil
	if code, _ := do(t, b, http.MethodGet, callback.String()); code != http.StatusBadRequest {
		t.Errorf("a used callback: %d, want 400", code)
	}
	if n := st.team.Sessions().Len(); n != 0 {
		t.Errorf("%d sessions, want none", n)
	}
}

// A token without the admin scope (the client may not ask for it) starts
// no session.
func TestDashboardLoginWithoutAdminScope(t *testing.T) {
	st := newTeamStack(t, []string{"other"})
	b := browser(t)
	code, body := do(t, b, http.MethodGet, st.url+LoginPath+"?login_hint=bob")
	if code == http.StatusOK || st.team.Sessions().Len() != 0 {
		t.Errorf("login without the admin scope: %d %.200s; %d sessions", code, body, st.team.Sessions().Len())
	}
}

// Without a dashboard client the login routes say how to set one up.
func TestDashboardLoginNotConfigured(t *testing.T) {
	g := guard.New(guard.Options{})
	srv := httptest.NewServer(New(g, false, http.NotFoundHandler()))
	defer srv.Close()
	if code, body := do(t, http.DefaultClient, http.MethodGet, srv.URL+LoginPath); code != http.StatusNotFound || !strings.Contains(body, "auth.dashboardClientId") {
		t.Errorf("login without team identity: %d %q", code, body)
	}
	if code, _ := do(t, http.DefaultClient, http.MethodPost, srv.URL+LoginPath); code != http.StatusMethodNotAllowed {
		t.Errorf("POST login: %d, want 405", code)
	}
}

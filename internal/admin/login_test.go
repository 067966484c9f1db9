package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient/oauthtest"
)

// loginEnv is a fleet with a remote server behind a fake authorization
// server (remote) and a stdio one (local), served as serve serves them:
// the API under /api/ and the dashboard's /oauth/callback beside it.
type loginEnv struct {
	t      *testing.T
	as     *oauthtest.Server
	f      *fleet.Fleet
	base   string
	token  string
	mu     sync.Mutex
	bodies []string // every body the handler answered, for leak checks
}

func newLoginEnv(t *testing.T, token string, o oauthtest.Options) *loginEnv {
	t.Helper()
	as := oauthtest.New(t, o)
	cfg, err := config.Parse(fmt.Appendf(nil, `{"mcpServers":{"remote":{"url":%q},"local":{"command":"x"}}}`, as.URL), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.New(cfg, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	api := New(f, nil, Options{Access: guard.Options{Token: token}})
	mux := http.NewServeMux()
	mux.Handle("/api/", api)
	mux.HandleFunc("GET /oauth/callback", api.OAuthCallback)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &loginEnv{t: t, as: as, f: f, base: srv.URL, token: token}
}

// do sends a request (with the token, unless noToken) and returns the
// status and body; redirects are not followed.
func (e *loginEnv) do(method, path, body string, hdr ...string) (int, string) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	noToken := false
	for i := 0; i+1 < len(hdr); i += 2 {
		switch hdr[i] {
		case "no-token":
			noToken = true
		case "Host":
			req.Host = hdr[i+1]
		default:
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	if e.token != "" && !noToken {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	e.mu.Lock()
	e.bodies = append(e.bodies, string(b))
	e.mu.Unlock()
	return resp.StatusCode, string(b)
}

// begin begins a login of remote with redirectURI ("": the dashboard's).
func (e *loginEnv) begin(redirectURI string) LoginStarted {
	e.t.Helper()
	body := "{}"
	if redirectURI != "" {
		body = fmt.Sprintf(`{"redirectUri":%q}`, redirectURI)
	}
	code, b := e.do("POST", "/api/servers/remote/login", body)
	var st LoginStarted
	if code != http.StatusOK || json.Unmarshal([]byte(b), &st) != nil || st.Flow == "" || st.AuthorizationURL == "" {
		e.t.Fatalf("begin: %d %s", code, b)
	}
	return st
}

// noTokenLeaked fails if any issued token is in any body answered.
func (e *loginEnv) noTokenLeaked() {
	e.t.Helper()
	toks := e.as.IssuedTokens()
	if len(toks) == 0 {
		e.t.Fatal("no token was issued: the leak check checks nothing")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range e.bodies {
		for _, tok := range toks {
			if strings.Contains(b, tok) {
				e.t.Fatalf("a token is in an answer: %s", b)
			}
		}
	}
}

// The CLI's flow: begin with its loopback redirect, the browser's
// approval, complete with the redirect's query; then the grant's state,
// and logout with revocation. No token is in any answer.
func TestLoginBeginComplete(t *testing.T) {
	e := newLoginEnv(t, "s3cret", oauthtest.Options{Revocation: true, RefreshTokens: true})
	redirect := "http://127.0.0.1:9/callback"
	st := e.begin(redirect)
	au, err := url.Parse(st.AuthorizationURL)
	if err != nil || au.Query().Get("redirect_uri") != redirect || au.Query().Get("state") == "" || au.Query().Get("code_challenge") == "" {
		t.Fatalf("authorization URL %s (want our redirect, a state, PKCE)", st.AuthorizationURL)
	}
	if st.Server != "remote" || !st.Expires.After(time.Now()) {
		t.Fatalf("begin answered %+v", st)
	}
	q, err := e.as.Approve(st.AuthorizationURL)
	if err != nil {
		t.Fatal(err)
	}
	code, b := e.do("POST", "/api/servers/remote/login/"+url.PathEscape(st.Flow), fmt.Sprintf(`{"query":%q}`, q.Encode()))
	var done LoginDone
	if code != http.StatusOK || json.Unmarshal([]byte(b), &done) != nil {
		t.Fatalf("complete: %d %s", code, b)
	}
	if done.Server != "remote" || done.Auth.State != oauthclient.StateLoggedIn || done.Auth.Issuer != e.as.Issuer || done.Auth.Expiry.IsZero() || !done.Auth.Refreshable {
		t.Fatalf("complete answered %+v", done)
	}
	// The same flow again: used.
	if code, b := e.do("POST", "/api/servers/remote/login/"+url.PathEscape(st.Flow), fmt.Sprintf(`{"query":%q}`, q.Encode())); code != http.StatusNotFound {
		t.Errorf("a second complete of the flow: %d %s, want 404", code, b)
	}
	code, b = e.do("GET", "/api/servers/remote/auth", "")
	if code != http.StatusOK || !strings.Contains(b, `"state": "logged-in"`) {
		t.Fatalf("auth: %d %s", code, b)
	}
	if code, b := e.do("GET", "/api/servers/remote", ""); code != http.StatusOK || !strings.Contains(b, "logged-in") {
		t.Fatalf("detail: %d %s", code, b)
	}
	if code, b := e.do("GET", "/api/servers", ""); code != http.StatusOK {
		t.Fatalf("servers: %d %s", code, b)
	}
	e.noTokenLeaked()

	code, b = e.do("POST", "/api/servers/remote/logout", "")
	var out LogoutDone
	if code != http.StatusOK || json.Unmarshal([]byte(b), &out) != nil || !out.Revoked || out.RevokeError != "" {
		t.Fatalf("logout: %d %s", code, b)
	}
	if len(e.as.Revocations()) == 0 {
		t.Fatal("logout answered revoked, but the authorization server revoked nothing")
	}
	if code, b := e.do("GET", "/api/servers/remote/auth", ""); code != http.StatusOK || strings.Contains(b, "logged-in") {
		t.Fatalf("auth after logout: %d %s", code, b)
	}
	e.noTokenLeaked()
}

// A logout where the authorization server offers no revocation forgets
// the tokens and says they were not revoked, with no error.
func TestLogoutWithoutRevocation(t *testing.T) {
	e := newLoginEnv(t, "", oauthtest.Options{})
	st := e.begin("http://127.0.0.1:9/callback")
	q, err := e.as.Approve(st.AuthorizationURL)
	if err != nil {
		t.Fatal(err)
	}
	if code, b := e.do("POST", "/api/servers/remote/login/"+st.Flow, fmt.Sprintf(`{"query":%q}`, q.Encode())); code != 200 {
		t.Fatalf("complete: %d %s", code, b)
	}
	code, b := e.do("POST", "/api/servers/remote/logout", "")
	var out LogoutDone
	if code != http.StatusOK || json.Unmarshal([]byte(b), &out) != nil || out.Revoked {
		t.Fatalf("logout: %d %s", code, b)
	}
	if code, b := e.do("POST", "/api/servers/local/logout", ""); code != http.StatusConflict {
		t.Errorf("logout of a stdio server: %d %s, want 409", code, b)
	}
}

func TestLoginRefusals(t *testing.T) {
	e := newLoginEnv(t, "s3cret", oauthtest.Options{})
	for _, bad := range []string{"http://example.com/callback", "https://127.0.0.1/callback", "http://user@127.0.0.1:9/cb", "http://127.0.0.1.example.com/cb", "file:///tmp/x", "not a url"} {
		code, b := e.do("POST", "/api/servers/remote/login", fmt.Sprintf(`{"redirectUri":%q}`, bad))
		if code != http.StatusBadRequest || !strings.Contains(b, "loopback") {
			t.Errorf("redirectUri %q: %d %s, want 400 saying it must be loopback", bad, code, b)
		}
	}
	if n := e.as.Count("authorize") + e.as.Count("prm") + e.as.Count("as-metadata"); n != 0 {
		t.Errorf("a refused begin reached the authorization server (%d requests)", n)
	}
	if code, b := e.do("POST", "/api/servers/remote/login", `{"redirectUri":`); code != http.StatusBadRequest || !strings.Contains(b, "JSON") {
		t.Errorf("a broken body: %d %s, want 400", code, b)
	}
	if code, b := e.do("POST", "/api/servers/local/login", `{"redirectUri":"http://127.0.0.1:9/cb"}`); code != http.StatusConflict || !strings.Contains(b, "not a remote server") {
		t.Errorf("begin for a stdio server: %d %s, want 409 saying it is not remote", code, b)
	}
	if code, b := e.do("GET", "/api/servers/local/auth", ""); code != http.StatusConflict {
		t.Errorf("auth of a stdio server: %d %s, want 409", code, b)
	}
	if code, b := e.do("POST", "/api/servers/nosuch/login", `{}`); code != http.StatusNotFound {
		t.Errorf("begin for no such server: %d %s, want 404", code, b)
	}
	// Complete with a flow never begun (before any grant exists, then after).
	if code, b := e.do("POST", "/api/servers/remote/login/nosuchflow", `{"query":"code=x&state=y"}`); code != http.StatusNotFound {
		t.Errorf("complete an unknown flow (no grant yet): %d %s, want 404", code, b)
	}
	st := e.begin("http://localhost:9/callback")
	if code, b := e.do("POST", "/api/servers/remote/login/nosuchflow", `{"query":"code=x&state=y"}`); code != http.StatusNotFound {
		t.Errorf("complete an unknown flow: %d %s, want 404", code, b)
	}
	// Cancel, then complete with the real redirect: gone.
	q, err := e.as.Approve(st.AuthorizationURL)
	if err != nil {
		t.Fatal(err)
	}
	if code, b := e.do("POST", "/api/servers/remote/login/"+st.Flow+"/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, b)
	}
	if code, b := e.do("POST", "/api/servers/remote/login/"+st.Flow, fmt.Sprintf(`{"query":%q}`, q.Encode())); code != http.StatusNotFound {
		t.Errorf("complete after cancel: %d %s, want 404", code, b)
	}
	if e.as.Count("token") != 0 {
		t.Error("a cancelled flow's code was exchanged")
	}
	// A flow of one server is unknown to another.
	st = e.begin("http://127.0.0.1:9/callback")
	q, _ = e.as.Approve(st.AuthorizationURL)
	if code, b := e.do("POST", "/api/servers/local/login/"+st.Flow, fmt.Sprintf(`{"query":%q}`, q.Encode())); code == http.StatusOK {
		t.Errorf("remote's flow completed at local: %d %s", code, b)
	}
}

// The login routes need the token and the listener's own origin; the
// dashboard's callback needs neither token nor Origin, but passes the
// Host check.
func TestLoginGuard(t *testing.T) {
	e := newLoginEnv(t, "s3cret", oauthtest.Options{})
	for _, p := range []string{"/api/servers/remote/login", "/api/servers/remote/login/f", "/api/servers/remote/login/f/cancel", "/api/servers/remote/logout"} {
		if code, b := e.do("POST", p, "{}", "no-token", ""); code != http.StatusUnauthorized {
			t.Errorf("POST %s without the token: %d %s, want 401", p, code, b)
		}
		for _, origin := range []string{"http://evil.example", "http://localhost:5173"} {
			if code, b := e.do("POST", p, "{}", "Origin", origin); code != http.StatusForbidden {
				t.Errorf("POST %s from Origin %s: %d %s, want 403", p, origin, code, b)
			}
		}
	}
	if code, b := e.do("GET", "/api/servers/remote/auth", "", "no-token", ""); code != http.StatusUnauthorized {
		t.Errorf("GET auth without the token: %d %s, want 401", code, b)
	}
	if e.as.Count("authorize")+e.as.Count("prm")+e.as.Count("as-metadata") != 0 {
		t.Error("a refused request reached the authorization server")
	}
	// The callback: no token asked (the page's 400 for no state, not 401).
	if code, b := e.do("GET", "/oauth/callback?state=x&code=y", "", "no-token", ""); code != http.StatusBadRequest || !strings.Contains(b, "Login failed") {
		t.Errorf("callback without the token: %d %s, want the 400 page", code, b)
	}
	if code, b := e.do("GET", "/oauth/callback?state=x&code=y", "", "no-token", "", "Host", "evil.example"); code != http.StatusForbidden {
		t.Errorf("callback with a foreign Host: %d %s, want 403", code, b)
	}
	if code, b := e.do("GET", "/oauth/callback?state=x&code=y", "", "no-token", "", "Origin", "null"); code != http.StatusForbidden {
		t.Errorf("callback with Origin null: %d %s, want 403", code, b)
	}
	// The same origin passes AllowChange for the dashboard's begin.
	if code, b := e.do("POST", "/api/servers/remote/login", "{}", "Origin", e.base); code != http.StatusOK {
		t.Errorf("begin from the listener's own origin: %d %s", code, b)
	}
}

// The dashboard's flow: begin with {} redirects to this listener's own
// /oauth/callback, which completes the login without the token; the
// state is single-use.
func TestDashboardLoginCallback(t *testing.T) {
	e := newLoginEnv(t, "s3cret", oauthtest.Options{IDTokenClaims: map[string]any{"sub": "alice"}})
	st := e.begin("")
	au, _ := url.Parse(st.AuthorizationURL)
	if want := e.base + "/oauth/callback"; au.Query().Get("redirect_uri") != want {
		t.Fatalf("the dashboard's redirect is %q, want %q", au.Query().Get("redirect_uri"), want)
	}
	// The browser: the authorization server's redirect, then its target.
	resp, err := (&http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(st.AuthorizationURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || !strings.HasPrefix(loc.String(), e.base+"/oauth/callback?") {
		t.Fatalf("authorize: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	path := strings.TrimPrefix(loc.String(), e.base)
	code, page := e.do("GET", path, "", "no-token", "")
	if code != http.StatusOK || !strings.Contains(page, "Logged in to remote") || !strings.Contains(page, e.as.Issuer) || !strings.Contains(page, `href="/"`) || !strings.Contains(page, `href="/ui/icon.svg"`) {
		t.Fatalf("callback: %d %s", code, page)
	}
	if info, ok := e.f.Get("remote").OAuth(); !ok || info.State != oauthclient.StateLoggedIn {
		t.Fatalf("after the callback the grant is %+v", info)
	}
	if code, page := e.do("GET", path, "", "no-token", ""); code != http.StatusBadRequest || !strings.Contains(page, "Login failed") {
		t.Errorf("the same state again: %d %s, want the 400 page", code, page)
	}
	if code, page := e.do("GET", "/oauth/callback?state=unknown&code=x", "", "no-token", ""); code != http.StatusBadRequest {
		t.Errorf("an unknown state: %d %s, want 400", code, page)
	}
	if e.as.Count("token") != 1 {
		t.Errorf("%d token requests, want the one exchange", e.as.Count("token"))
	}
	e.noTokenLeaked()

	// An error redirect (access denied) ends the flow with a page that
	// says so.
	e.as.Set(func(o *oauthtest.Options) {
		o.AuthorizeError, o.AuthorizeErrorDesc = "access_denied", "the user said no"
	})
	st = e.begin("")
	q, err := e.as.Approve(st.AuthorizationURL)
	if err != nil {
		t.Fatal(err)
	}
	code, page = e.do("GET", "/oauth/callback?"+q.Encode(), "", "no-token", "")
	if code != http.StatusBadGateway || !strings.Contains(page, "Login to remote failed") || !strings.Contains(page, "access_denied") {
		t.Errorf("an access_denied redirect: %d %s", code, page)
	}
	// A markup-bearing description is escaped on the page.
	e.as.Set(func(o *oauthtest.Options) { o.AuthorizeErrorDesc = "<script>alert(1)</script>" })
	st = e.begin("")
	q, _ = e.as.Approve(st.AuthorizationURL)
	if _, page := e.do("GET", "/oauth/callback?"+q.Encode(), "", "no-token", ""); strings.Contains(page, "<script>") {
		t.Errorf("the page holds the authorization server's markup: %s", page)
	}
}

// At most maxDashboardFlows logins begun from the dashboard are held at
// once: the next is refused with 503 (and, refused, leaves no flow).
func TestDashboardFlowsBounded(t *testing.T) {
	e := newLoginEnv(t, "", oauthtest.Options{})
	first := e.begin("")
	for range maxDashboardFlows - 1 {
		e.begin("")
	}
	code, b := e.do("POST", "/api/servers/remote/login", "{}")
	if code != http.StatusServiceUnavailable || !strings.Contains(b, "too many") {
		t.Fatalf("begin %d: %d %s, want 503", maxDashboardFlows+1, code, b)
	}
	// The CLI's logins are not counted.
	e.begin("http://127.0.0.1:9/callback")
	// A callback frees its place.
	q, err := e.as.Approve(first.AuthorizationURL)
	if err != nil {
		t.Fatal(err)
	}
	e.do("GET", "/oauth/callback?"+q.Encode(), "", "no-token", "")
	if code, b := e.do("POST", "/api/servers/remote/login", "{}"); code != http.StatusOK {
		t.Fatalf("begin after a callback freed a place: %d %s", code, b)
	}
}

// A dashboard flow past its expiry is refused at the callback, and its
// place is freed for the next begin.
func TestDashboardFlowsExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d dashboardFlows
		for i := range maxDashboardFlows {
			if !d.add(fmt.Sprint("s", i), dashboardFlow{server: "remote", flow: "f", expires: time.Now().Add(time.Minute)}) {
				t.Fatalf("add %d refused", i)
			}
		}
		if d.add("one-more", dashboardFlow{expires: time.Now().Add(time.Minute)}) {
			t.Fatal("a flow beyond the bound was added")
		}
		if f, ok := d.take("s0"); !ok || f.server != "remote" {
			t.Fatalf("take of a live flow: %+v %v", f, ok)
		}
		if _, ok := d.take("s0"); ok {
			t.Fatal("a state was taken twice")
		}
		time.Sleep(time.Minute + time.Second)
		if _, ok := d.take("s1"); ok {
			t.Fatal("an expired flow was taken")
		}
		for i := range maxDashboardFlows {
			if !d.add(fmt.Sprint("n", i), dashboardFlow{expires: time.Now().Add(time.Minute)}) {
				t.Fatalf("add %d after the others expired refused", i)
			}
		}
	})
}

// Opened at another address than loopback, the dashboard cannot log in
// (its plain http redirect would be refused): a 409 that says what to do,
// before the authorization server is asked anything.
func TestDashboardLoginNeedsLoopback(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	cfg, err := config.Parse(fmt.Appendf(nil, `{"mcpServers":{"remote":{"url":%q}}}`, as.URL), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.New(cfg, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(f, nil, Options{Access: guard.Options{DisableHostCheck: true}}))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/api/servers/remote/login", strings.NewReader("{}"))
	req.Host = "192.168.1.5:8080"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), "loopback") || !strings.Contains(string(b), `mcpvisor login remote`) {
		t.Fatalf("begin from the dashboard at 192.168.1.5: %d %s", resp.StatusCode, b)
	}
	if n := as.Count("prm") + as.Count("as-metadata") + as.Count("register"); n != 0 {
		t.Errorf("the authorization server was asked %d times", n)
	}
	// localhost is loopback.
	req, _ = http.NewRequest("POST", srv.URL+"/api/servers/remote/login", strings.NewReader("{}"))
	req.Host = strings.Replace(strings.TrimPrefix(srv.URL, "http://"), "127.0.0.1", "localhost", 1)
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("begin from the dashboard at localhost: %d", resp2.StatusCode)
	}
}

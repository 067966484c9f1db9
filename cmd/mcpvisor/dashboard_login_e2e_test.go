package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/oauthclient/oauthtest"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// serverState is the named server's state in GET /api/servers.
func serverState(t *testing.T, base, token, name string) string {
	t.Helper()
	return serverPIDs(t, base, token)[name][0]
}

// TestDashboardLogin logs in to a remote server behind OAuth from the
// dashboard, in a headless browser against the real binary: the fake
// authorization server approves at once with a 302, which the browser
// follows to serve's /oauth/callback. The server's row shows needs-login
// and a named "Log in" button (hidden on every other row); the click
// ends on serve's "Logged in to remote" page, and back on the dashboard
// the server runs and the button is gone.
func TestDashboardLogin(t *testing.T) {
	browser := newBrowser(t)

	// The remote server: a go-sdk MCP server behind the fake's bearer check.
	ms := mcp.NewServer(&mcp.Implementation{Name: "remote-e2e", Version: "1.0.0"}, nil)
	mcp.AddTool(ms, &mcp.Tool{Name: "hello", Description: "Says hello."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}, nil, nil
	})
	as := oauthtest.New(t, oauthtest.Options{RefreshTokens: true, Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil)})

	fixture := testserver.Build(t)
	token := "dashboard-login-" + fmt.Sprint(time.Now().UnixNano())
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"mcpServers":{
		"local":{"command":%q,"eager":true,"idleTimeout":"0"},
		"remote":{"url":%q,"idleTimeout":"0"}}}`, fixture, as.URL)
	s := startServe(t, cfg, "--token-file", tokenFile)
	stopAtCleanup(t, s)
	base := s.base
	waitRunningAuthed(t, base, token, "local")

	// With this config and no request made, serve reaches the remote
	// server on its own (its first start, to learn its tools), is
	// answered 401, and the server turns needs-login; a request is then
	// refused at once, naming the command to run.
	deadline := time.Now().Add(20 * time.Second)
	for st := serverState(t, base, token, "remote"); st != "needs-login"; st = serverState(t, base, token, "remote") {
		if time.Now().After(deadline) {
			t.Fatalf("remote is %q 20 s after serve started, want needs-login", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, out, stderr := runBin(t, "call", "remote", "hello", "--addr", strings.TrimPrefix(base, "http://"), "--token-file", tokenFile)
	if code == 0 || !strings.Contains(out+stderr, "mcpvisor login remote") {
		t.Fatalf("a call before the login: exit %d %s %s (want a refusal naming mcpvisor login remote)", code, out, stderr)
	}
	if st := serverState(t, base, token, "remote"); st != "needs-login" {
		t.Fatalf("remote after a refused request is %q, want needs-login", st)
	}

	bt := newTab(t, browser)
	bt.do(t, "open the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	bt.do(t, "give the token", chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS(`#login button[type=submit]`)))
	bt.waitFor(t, "both servers listed", `document.querySelectorAll('tbody[data-server]').length === 2`)

	loginBtn := func(name string) string { return row(name) + `.querySelector('button[data-action=login]')` }
	visible := func(el string) string {
		return fmt.Sprintf(`(%s && !%[1]s.hidden && %[1]s.offsetParent !== null && getComputedStyle(%[1]s).display !== 'none')`, el)
	}
	bt.waitFor(t, "remote needs a login, with a visible Log in button", fmt.Sprintf(`%s.dataset.state === 'needs-login' && %[1]s.querySelector('.badge').textContent === 'needs-login' && %s`, row("remote"), visible(loginBtn("remote"))))
	if label := eval[string](t, bt, loginBtn("remote")+`.getAttribute('aria-label') + '|' + `+loginBtn("remote")+`.textContent`); label != "Log in to remote|Log in" {
		t.Errorf("the Log in button is named %q, want %q", label, "Log in to remote|Log in")
	}
	if eval[bool](t, bt, visible(loginBtn("local"))) || !eval[bool](t, bt, loginBtn("local")+`.hidden`) {
		t.Error("the Log in button shows on a running stdio server")
	}
	// Nor on a stopped one (whose Start button shows in its place).
	if status, body := authed(t, "POST", base, token, "/api/servers/local/stop"); status != 200 {
		t.Fatalf("stop local: %d %s", status, body)
	}
	bt.waitFor(t, "local stopped, Start shown, Log in hidden", fmt.Sprintf(`%s.dataset.state === 'stopped' && %s && %s.hidden`, row("local"), visible(row("local")+`.querySelector('button[data-action=start]')`), loginBtn("local")))
	if errs := bt.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors before the login: %v", errs)
	}

	// A begin that fails (the authorization server refuses to register
	// the client) is said on the page, and the button stays, enabled.
	as.Set(func(o *oauthtest.Options) { o.RegistrationError = http.StatusInternalServerError })
	bt.do(t, "click Log in (refused)", chromedp.Click(chromedp.CSS(`tbody[data-server="remote"] button[data-action=login]`)))
	bt.waitFor(t, "the refusal said", fmt.Sprintf(`document.getElementById('notice').textContent.startsWith('Could not log in to remote: ') && !%s.disabled && %s`, loginBtn("remote"), visible(loginBtn("remote"))))
	if at := eval[string](t, bt, `location.href`); at != base+"/" {
		t.Fatalf("a refused login navigated to %s", at)
	}
	as.Set(func(o *oauthtest.Options) { o.RegistrationError = 0 })

	// The click: serve begins the flow, the browser goes to the
	// authorization server, which redirects to serve's /oauth/callback.
	bt.do(t, "click Log in", chromedp.Click(chromedp.CSS(`tbody[data-server="remote"] button[data-action=login]`)))
	waitThroughNavigation(t, bt, "serve's page says logged in", `location.pathname === '/oauth/callback' && document.querySelector('h1') && document.querySelector('h1').textContent === 'Logged in to remote'`)
	if at := eval[string](t, bt, `location.origin`); at != base {
		t.Errorf("the callback page is at %s, want serve's origin %s", at, base)
	}
	page := eval[string](t, bt, `document.body.innerText`)
	if !strings.Contains(page, as.Issuer) {
		t.Errorf("the page does not name the issuer %s:\n%s", as.Issuer, page)
	}
	for _, tok := range as.IssuedTokens() {
		if strings.Contains(page, tok) || strings.Contains(eval[string](t, bt, `location.href`), tok) {
			t.Fatal("a token is on the callback page or in its URL")
		}
	}
	if len(as.IssuedTokens()) == 0 {
		t.Fatal("no token was issued")
	}

	// Back to the dashboard by the page's link: the server runs (the
	// login starts it again at once), the button is gone.
	bt.do(t, "back to the dashboard", chromedp.Click(chromedp.CSS(`a[href="/"]`)))
	waitThroughNavigation(t, bt, "remote running, no Log in button", fmt.Sprintf(`%s && %[1]s.dataset.state === 'running' && %s.hidden && !%s`, row("remote"), loginBtn("remote"), visible(loginBtn("remote"))))
	if st := serverState(t, base, token, "remote"); st != "running" {
		t.Fatalf("the API says remote is %q after the login", st)
	}
	code, out, stderr = runBin(t, "call", "remote", "hello", "--addr", strings.TrimPrefix(base, "http://"), "--token-file", tokenFile)
	if code != 0 || !strings.Contains(out, "hello") {
		t.Fatalf("a call after the login: exit %d %s %s", code, out, stderr)
	}
	status, body := authed(t, "GET", base, token, "/api/servers/remote/auth")
	var auth struct {
		Auth struct{ State, Issuer string }
	}
	if err := json.Unmarshal([]byte(body), &auth); status != 200 || err != nil || auth.Auth.State != "logged-in" || auth.Auth.Issuer != as.Issuer {
		t.Fatalf("remote's auth: %d %s", status, body)
	}
	// Besides the refused POST's own (its 502), no console error.
	for _, e := range bt.consoleErrors() {
		if !strings.Contains(e, "/api/servers/remote/login") || !strings.Contains(e, "502") {
			t.Errorf("console error: %s", e)
		}
	}
}

// waitThroughNavigation is waitFor across the tab's navigations: an
// evaluation the navigation cut short is tried again, within 20 s.
func waitThroughNavigation(t *testing.T, bt *browserTab, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(bt.ctx, 2*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			page, _ := chromedp.Run(bt.ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
			t.Fatalf("%s: %s never held (last error %v)\nconsole errors: %v\npage:\n%s", what, expr, err, bt.consoleErrors(), page)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

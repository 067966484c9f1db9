package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/internal/testserver/hydra"
)

// The dashboard behind team identity, in a headless Chromium against the
// real binary and a real issuer (Hydra, whose headless login app logs in
// its default subject): the page offers the organization's login; the
// click goes through Hydra's login and consent and back to serve's
// callback, and the dashboard lists the server with its session. The
// session is an HttpOnly cookie the page cannot read, and no token is in
// the page's storage; without the cookie the API answers 401; the
// logout ends the session (the API refuses the page afterwards).
func TestTeamAdminDashboardLogin(t *testing.T) {
	browser := newBrowser(t)
	h := hydra.Start(t, hydra.Options{DefaultSubject: "alice"})
	port := freeLoopbackPort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	pub := "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := h.CreateClient(ctx, hydra.ClientSpec{GrantTypes: []string{"authorization_code"}, Scopes: []string{"mcpvisor:admin"},
		AuthMethod: hydra.AuthNone, RedirectURIs: []string{pub + "/ui/callback"}, Audiences: []string{pub}})
	if err != nil {
		t.Fatal(err)
	}
	// Hydra makes its access-token key at its first token: before serve
	// fetches the issuer's keys.
	if _, err := h.AuthorizationCode(ctx, cl, "warm-up", []string{pub}, []string{"mcpvisor:admin"}); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"auth": {"issuer": %q, "publicUrl": %q, "dashboardClientId": %q}, "mcpServers": {"demo": {"command": %q}}}`,
		h.Issuer(), pub, cl.ID, testserver.Build(t))
	s := startServeEnv(t, cfg, t.TempDir(), noKeyring, "--listen", addr)
	stopAtCleanup(t, s)

	if body := getBody(t, pub, "/ui/auth.json"); !strings.Contains(body, `"login":true`) || !strings.Contains(body, cl.ID) {
		t.Fatalf("auth.json offers no login (%s): serve does not pass auth.dashboardClientId on to the guard's TeamConfig.DashboardClientID (internal/daemon/team.go)", strings.TrimSpace(body))
	}
	if code, _ := getStatus(t, pub, "/api/servers"); code != 401 {
		t.Fatalf("the API without a session: %d, want 401", code)
	}

	bt := newTab(t, browser)
	start := time.Now()
	bt.do(t, "open the dashboard", chromedp.Navigate(pub+"/"), chromedp.WaitVisible(chromedp.ID("sso-login")))
	bt.do(t, "log in at the issuer", chromedp.Click(chromedp.ID("sso-login")))
	waitAcrossNavigations(t, bt, "the server listed with the session", `location.origin === %q && location.pathname === "/" && document.querySelectorAll('tbody[data-server="demo"]').length === 1`, pub)
	t.Logf("dashboard login through Hydra took %v", time.Since(start).Round(time.Millisecond))
	bt.waitFor(t, "the logout offered", `!document.getElementById("logout").hidden && document.getElementById("login").hidden`)
	if eval[bool](t, bt, `document.cookie.includes("mcpvisor-session")`) {
		t.Error("the page can read the session cookie (not HttpOnly)")
	}
	if n := eval[int](t, bt, `sessionStorage.length + Object.keys(localStorage).filter(k => k !== "mcpvisor.theme").length`); n != 0 {
		t.Errorf("the page keeps %d items in its storage; a session needs none", n)
	}
	if st := eval[string](t, bt, `document.cookie + "|" + JSON.stringify(Object.entries(sessionStorage))`); strings.Contains(st, "eyJ") {
		t.Errorf("a token reached the page: %s", st)
	}

	bt.do(t, "log out", chromedp.Click(chromedp.ID("logout")))
	bt.waitFor(t, "the login offered again", `!document.getElementById("login").hidden && !document.getElementById("sso").hidden`)
	bt.waitFor(t, "the API refuses the page after the logout", `(window.__st === undefined && fetch("/api/servers", {cache: "no-store"}).then(r => { window.__st = r.status }), window.__st === 401)`)
	if errs := bt.consoleErrors(); len(errs) > 0 {
		// The 401 of the check above is the browser's own log line.
		for _, e := range errs {
			if !strings.Contains(e, "401") {
				t.Errorf("console error: %s", e)
			}
		}
	}
}

// waitAcrossNavigations waits, within 30 s, until expr (a format of
// args) is true in the tab, through the navigations of a login (each
// ends the page an evaluation ran in).
func waitAcrossNavigations(t *testing.T, bt *browserTab, what, expr string, args ...any) {
	t.Helper()
	expr = fmt.Sprintf(expr, args...)
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(bt.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	page, _ := chromedp.Run(bt.ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
	t.Fatalf("%s: %s never held (%v)\nconsole errors: %v\npage:\n%s", what, expr, last, bt.consoleErrors(), page)
}

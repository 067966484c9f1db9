package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	chromekb "github.com/chromedp/chromedp/kb"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// The dashboard in a real headless browser (Debian's chromium, installed
// by scripts/test-deps.sh), against the real mcpvisor binary.

// chromiumPath is the browser the dashboard tests drive:
// $MCPVISOR_CHROMIUM, else /usr/bin/chromium.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("MCPVISOR_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the dashboard tests need a Chromium at %s (set MCPVISOR_CHROMIUM, or run `make test-deps`, which installs Debian's chromium): %v", p, err)
	}
	return p
}

// newBrowser starts one headless browser for the test, with a fresh
// profile and nothing that reaches the network on its own; it is stopped
// when the test ends. Each tab(t) opens a tab in it.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	// The first action starts the browser, bound to the context it is
	// given (a timeout there would end the browser with it).
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chromiumPath(t), err)
	}
	return bctx
}

// browserTab is one tab, and every console error and uncaught exception
// its pages report.
type browserTab struct {
	ctx context.Context

	mu     sync.Mutex
	errors []string
}

func newTab(t *testing.T, browser context.Context) *browserTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	bt := &browserTab{ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				bt.mu.Lock()
				bt.errors = append(bt.errors, fmt.Sprintf("%s %s:%d %s", m.Type, m.URL, m.Line+1, m.Text))
				bt.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return bt
}

func (bt *browserTab) consoleErrors() []string {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	return append([]string(nil), bt.errors...)
}

// do runs actions in the tab, bounded by 30 s.
func (bt *browserTab) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bt.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v (console errors: %v)", what, err, bt.consoleErrors())
	}
}

// screenshot writes a PNG of what the tab's window shows at the top of
// the page, with no element focused, to path.
func (bt *browserTab) screenshot(t *testing.T, path string) {
	t.Helper()
	eval[bool](t, bt, `(document.activeElement.blur(), window.scrollTo(0, 0), true)`)
	ctx, cancel := context.WithTimeout(bt.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot written to %s", path)
}

// eval evaluates expr in the page.
func eval[T any](t *testing.T, bt *browserTab, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(bt.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor waits, within 20 s, until expr is truthy in the page.
func (bt *browserTab) waitFor(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bt.ctx, 25*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		page, _ := chromedp.Run(bt.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %s never held: %v\nconsole errors: %v\npage:\n%s", what, expr, err, bt.consoleErrors(), page)
	}
}

// row is the JavaScript of the named server's row of the dashboard.
func row(name string) string {
	return fmt.Sprintf(`document.querySelector('tbody[data-server=%q]')`, name)
}

// authed sends method path to the API with the bearer token and returns
// the status and the body.
func authed(t *testing.T, method, base, token, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// serverPIDs is GET /api/servers with the token: each server's state and
// pid.
func serverPIDs(t *testing.T, base, token string) map[string][2]string {
	t.Helper()
	status, body := authed(t, "GET", base, token, "/api/servers")
	if status != 200 {
		t.Fatalf("/api/servers: %d %s", status, body)
	}
	var v struct {
		Servers []struct {
			Name, State string
			PID         int
		}
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	for _, s := range v.Servers {
		out[s.Name] = [2]string{s.State, fmt.Sprint(s.PID)}
	}
	return out
}

// dashboardFleet serves a small fleet with a token: alpha and beta run
// (eager, never asleep on their own; alpha wrote three stderr lines at
// start), gamma is learned and sleeps, crashy fails at every start,
// delta is there to be stopped, and pinned (its tools pinned as first
// learned) changes its tools when variant says 1 at a start.
func dashboardFleet(t *testing.T) (base, token, tokenFile, variant string) {
	fixture := testserver.Build(t)
	variant = filepath.Join(t.TempDir(), "variant")
	if err := os.WriteFile(variant, []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token = "dashboard-" + fmt.Sprint(time.Now().UnixNano())
	tokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"mcpServers":{
		"alpha":{"command":%[1]q,"args":["-stderr-lines","3"],"eager":true,"idleTimeout":"0"},
		"beta":{"command":%[1]q,"eager":true,"idleTimeout":"0"},
		"crashy":{"command":%[1]q,"args":["-crash-at-start"],"eager":true,"restart":{"maxAttempts":1}},
		"delta":{"command":%[1]q,"eager":true,"idleTimeout":"0"},
		"gamma":{"command":%[1]q},
		"pinned":{"command":%[1]q,"args":["-tools-variant-file",%[2]q],"pin":true}}}`, fixture, variant)
	s := startServe(t, cfg, "--token-file", tokenFile)
	stopAtCleanup(t, s)
	return s.base, token, tokenFile, variant
}

// TestDashboard loads the dashboard in a headless browser against a real
// serve with a token, and checks what an operator relies on: it asks for
// the token and shows every server once given it; a server put to sleep
// through the API turns dormant on the page without a reload; restart,
// pressed from the keyboard, restarts it and the new pid shows; the
// stderr tail of an expanded server shows a line the server writes after
// it was opened; the clients of a server show in its row and its detail
// once one used it; every button is reachable by Tab and has a name; on a
// phone's width nothing overflows sideways; and no page reports a console
// error or an uncaught exception. One browser serves every subtest.
// The pinned server's pending definitions show each changed field's old
// and new value (a long one collapsible, markup as text) and a new tool
// whole. MCPVISOR_DASHBOARD_SCREENSHOT=FILE also writes a screenshot there (make
// it docs/dashboard.png).
func TestDashboard(t *testing.T) {
	browser := newBrowser(t)
	base, token, tokenFile, variant := dashboardFleet(t)
	waitRunningAuthed(t, base, token, "alpha", "beta", "delta")
	// The baseline for the paint timing: a minimal page (a heading and a
	// paragraph) in its own tab of the same browser, loaded first.
	t.Run("baseline page", func(t *testing.T) {
		page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, `<!doctype html><html lang="en"><title>baseline</title><h1>baseline</h1><p>A minimal page.</p></html>`)
		}))
		defer page.Close()
		base := newTab(t, browser)
		base.do(t, "open the baseline page", chromedp.Navigate(page.URL), chromedp.WaitVisible(chromedp.CSS("h1")))
		paintTiming(t, base, "baseline (a minimal page, first load)")
	})
	bt := newTab(t, browser)

	t.Run("login", func(t *testing.T) {
		bt.do(t, "open the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")))
		if shown := eval[bool](t, bt, `!document.getElementById('app').hidden || document.querySelectorAll('tbody[data-server]').length > 0`); shown {
			t.Fatal("the dashboard showed servers before it was given the token")
		}
		bt.do(t, "give the token", chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS(`#login button[type=submit]`)))
		bt.waitFor(t, "every server listed", `document.querySelectorAll('tbody[data-server]').length === 6`)
		bt.waitFor(t, "the event stream", `document.getElementById('conn').classList.contains('live')`)
		if stored := eval[string](t, bt, `sessionStorage.getItem('mcpvisor.token') + '|' + location.href`); stored != token+"|"+base+"/" {
			t.Fatalf("token kept as %q (it belongs in sessionStorage, never in the URL)", stored)
		}
		api := serverPIDs(t, base, token)
		bt.waitFor(t, "alpha's pid", fmt.Sprintf(`%s.querySelector('td.pid').textContent === %q`, row("alpha"), api["alpha"][1]))
		paintTiming(t, bt, "first load, fresh browser")
	})

	t.Run("reload keeps the token in the tab", func(t *testing.T) {
		bt.do(t, "reload", chromedp.Reload())
		bt.waitFor(t, "every server listed again, without the login form", `document.getElementById('login').hidden && document.querySelectorAll('tbody[data-server]').length === 6`)
		paintTiming(t, bt, "reload")
	})

	// A marker in the page's globals: gone if the page reloads.
	eval[bool](t, bt, `window.__noReload = true`)

	var slept string
	t.Run("sleep through the API shows dormant", func(t *testing.T) {
		slept = serverPIDs(t, base, token)["alpha"][1]
		if status, body := authed(t, "POST", base, token, "/api/servers/alpha/sleep"); status != 200 {
			t.Fatalf("sleep: %d %s", status, body)
		}
		bt.waitFor(t, "alpha dormant on the page", fmt.Sprintf(`%s.dataset.state === 'dormant' && %[1]s.querySelector('.badge').textContent === 'dormant' && %[1]s.querySelector('td.pid').textContent === '–'`, row("alpha")))
		bt.waitFor(t, "the dormant event in the timeline", `[...document.querySelectorAll('#events li[data-type=dormant][data-server=alpha]')].some(li => li.textContent.includes('by operator'))`)
		if !eval[bool](t, bt, `window.__noReload === true`) {
			t.Fatal("the page reloaded")
		}
	})

	t.Run("keyboard", func(t *testing.T) {
		// Every button has a name, and Tab reaches alpha's restart button.
		unnamed := eval[[]string](t, bt, `[...document.querySelectorAll('button')].filter(b => !b.hidden && !(b.getAttribute('aria-label') || b.textContent).trim()).map(b => b.outerHTML)`)
		if len(unnamed) > 0 {
			t.Errorf("buttons without a name: %v", unnamed)
		}
		eval[bool](t, bt, `(document.activeElement && document.activeElement.blur(), true)`)
		seen := []string{}
		for i := 0; ; i++ {
			if i == 80 {
				t.Fatalf("Tab never reached alpha's restart button; it went through %v", seen)
			}
			bt.do(t, "Tab", chromedp.KeyEvent(chromekb.Tab))
			label := eval[string](t, bt, `document.activeElement ? (document.activeElement.getAttribute('aria-label') || document.activeElement.textContent || document.activeElement.tagName) : ''`)
			seen = append(seen, label)
			if label == "Restart alpha" {
				break
			}
		}
		bt.do(t, "press restart", chromedp.KeyEvent(chromekb.Enter))
		bt.waitFor(t, "alpha running with a new pid", fmt.Sprintf(`%s.dataset.state === 'running' && /^[0-9]+$/.test(%[1]s.querySelector('td.pid').textContent) && %[1]s.querySelector('td.pid').textContent !== %q`, row("alpha"), slept))
		api := serverPIDs(t, base, token)["alpha"]
		if api[0] != "running" || api[1] == slept {
			t.Fatalf("the API says alpha is %v after restart (pid before sleep %s)", api, slept)
		}
		bt.waitFor(t, "the page shows the API's pid", fmt.Sprintf(`%s.querySelector('td.pid').textContent === %q`, row("alpha"), api[1]))
		bt.waitFor(t, "the result said", `document.getElementById('notice').textContent.startsWith('Restarted alpha, pid ')`)
	})

	t.Run("stderr tail is live", func(t *testing.T) {
		bt.do(t, "expand alpha", chromedp.Click(chromedp.CSS(`tbody[data-server="alpha"] td.name button`)))
		bt.waitFor(t, "the kept lines", fmt.Sprintf(`%s.querySelector('pre.stderr').textContent.includes('stderr line 3')`, row("alpha")))
		bt.do(t, "expand gamma", chromedp.Click(chromedp.CSS(`tbody[data-server="gamma"] td.name button`)))
		bt.waitFor(t, "gamma's tools, learned at start", fmt.Sprintf(`%s.querySelector('tr.detail').textContent.includes('stderr — Writes text')`, row("gamma")))
		line := fmt.Sprintf("written while watched %d", time.Now().UnixNano())
		if code, out, stderr := runBin(t, "call", "alpha", "stderr", "--arg", "text="+line, "--addr", strings.TrimPrefix(base, "http://"), "--token-file", tokenFile); code != 0 {
			t.Fatalf("call alpha stderr: exit %d %s %s", code, out, stderr)
		}
		bt.waitFor(t, "the new line on the page", fmt.Sprintf(`%s.querySelector('pre.stderr').textContent.includes(%q)`, row("alpha"), line))
	})

	t.Run("clients", func(t *testing.T) {
		// beta: no client yet; then mcpvisor call (clientInfo
		// mcpvisor-cli) twice, and the row and the detail name it.
		bt.waitFor(t, "no client of beta yet", fmt.Sprintf(`%s.querySelector('td.clients').textContent === '–'`, row("beta")))
		for range 2 {
			if code, out, stderr := runBin(t, "call", "beta", "echo", "--arg", "text=hi", "--addr", strings.TrimPrefix(base, "http://"), "--token-file", tokenFile); code != 0 {
				t.Fatalf("call beta echo: exit %d %s %s", code, out, stderr)
			}
		}
		// What the API counts (each call is its requests: the tool's
		// list, then the call), the page shows.
		status, body := authed(t, "GET", base, token, "/api/servers/beta")
		var d struct {
			Clients []struct {
				Name, Version string
				Requests      int
			}
		}
		if err := json.Unmarshal([]byte(body), &d); status != 200 || err != nil || len(d.Clients) != 1 || d.Clients[0].Name != "mcpvisor-cli" || d.Clients[0].Requests < 2 {
			t.Fatalf("beta's clients in the API: %d %s", status, body)
		}
		n := d.Clients[0].Requests
		bt.waitFor(t, "beta's client in its row", fmt.Sprintf(`%s.querySelector('td.clients').textContent === 'mcpvisor-cli' && %[1]s.querySelector('td.clients').title === 'mcpvisor-cli (%d)'`, row("beta"), n))
		bt.do(t, "expand beta", chromedp.Click(chromedp.CSS(`tbody[data-server="beta"] td.name button`)))
		client := row("beta") + `.querySelector('tr.detail [data-client="mcpvisor-cli"]')`
		bt.waitFor(t, "beta's clients in its detail", fmt.Sprintf(`%s !== null && %[1]s.children[1].textContent === %[2]q && %[1]s.children[2].textContent === '%[3]d' && %[1]s.children[3].textContent.endsWith(' ago')`, client, d.Clients[0].Version, n))
		bt.do(t, "collapse beta", chromedp.Click(chromedp.CSS(`tbody[data-server="beta"] td.name button`)))
	})

	t.Run("changed definitions are shown and approved", func(t *testing.T) {
		// Variant 3: echo's description changes to a long one, on several
		// lines, with markup; reverse is new.
		if err := os.WriteFile(variant, []byte("3\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		height := row("pinned") + ".querySelector('tr').getBoundingClientRect().height"
		before := eval[float64](t, bt, height)
		if status, body := authed(t, "POST", base, token, "/api/servers/pinned/restart"); status != 200 {
			t.Fatalf("restart pinned: %d %s", status, body)
		}
		bt.waitFor(t, "the definitions_changed event in the timeline", `[...document.querySelectorAll('#events li[data-type=definitions_changed][data-server=pinned]')].some(li => li.textContent.includes('echo'))`)
		// The page reads the servers again shortly after the event, and
		// pinned's row then takes its pending count (at the same height,
		// at every width: checked below). The clicks below wait for that
		// read, so that they aim at a page that no longer moves.
		status, body := authed(t, "GET", base, token, "/api/servers/pinned")
		var held struct {
			Definitions struct{ Pending []json.RawMessage }
		}
		if err := json.Unmarshal([]byte(body), &held); status != 200 || err != nil || len(held.Definitions.Pending) == 0 {
			t.Fatalf("pinned's pending definitions: %d %s", status, body)
		}
		bt.waitFor(t, "pinned's row counts its pending definitions", fmt.Sprintf(`%s.querySelector('span.pending').textContent === '%d pending'`, row("pinned"), len(held.Definitions.Pending)))
		if after := eval[float64](t, bt, height); after != before {
			t.Errorf("pinned's row went from %.1f px high to %.1f px when it took its pending count", before, after)
		}
		// Nor at other widths, down to a phone's: the row measured with
		// the count hidden and shown.
		for _, w := range []int64{1024, 800, 600, 390} {
			bt.do(t, fmt.Sprintf("a %d px viewport", w), chromedp.EmulateViewport(w, 900))
			grew := eval[string](t, bt, fmt.Sprintf(`(() => { const b = %s.querySelector('span.pending'); b.hidden = true; const h0 = %s; b.hidden = false; const h1 = %[2]s; return h0 === h1 ? '' : h0 + ' px → ' + h1 + ' px'; })()`, row("pinned"), height))
			if grew != "" {
				t.Errorf("at %d px wide, pinned's row grows when it shows its pending count: %s", w, grew)
			}
		}
		bt.do(t, "back to a desktop viewport", chromedp.EmulateViewport(1280, 900))
		bt.do(t, "expand pinned", chromedp.Click(chromedp.CSS(`tbody[data-server="pinned"] td.name button`)))
		detail := row("pinned") + ".querySelector('tr.detail')"
		bt.waitFor(t, "the pending definitions, with the fields that changed", fmt.Sprintf(`%s.textContent.includes('Pending definitions') && %[1]s.textContent.includes('echo') && !%[1]s.textContent.includes('[object Object]')`, detail))
		// Each changed field with its old and new value, the new one whole.
		field := detail + ".querySelector('[data-tool=echo] [data-path=description]')"
		bt.waitFor(t, "echo's description, old and new", fmt.Sprintf(`%s && %[1]s.querySelector('.old').textContent.includes('Returns the given text.') && %[1]s.querySelector('.new').textContent.includes(%q)`, field, testserver.InjectedDescription))
		// A long value folds away (and opens to read).
		if !eval[bool](t, bt, fmt.Sprintf(`%s.tagName === 'DETAILS' && !%[1]s.open && %[1]s.querySelector('summary') !== null`, field)) {
			t.Errorf("a long changed value is not collapsible: %s", eval[string](t, bt, field+".outerHTML"))
		}
		// Opened, it stays open (the same element) while the page reads
		// the details again, as it does every poll: the instances table
		// is rebuilt by each read.
		bt.do(t, "open echo's description", chromedp.Click(chromedp.CSS(`tbody[data-server="pinned"] tr.detail [data-tool=echo] [data-path=description] summary`)))
		instances := detail + ".querySelector('table.inner')"
		if !eval[bool](t, bt, fmt.Sprintf(`%s.open && (%[1]s.dataset.seen = 'y') === 'y' && %s !== null && (%[2]s.dataset.seen = 'y') === 'y'`, field, instances)) {
			t.Fatal("echo's description did not open")
		}
		bt.waitFor(t, "the details read again", fmt.Sprintf(`%s !== null && %[1]s.dataset.seen === undefined`, instances))
		if !eval[bool](t, bt, fmt.Sprintf(`%s !== null && %[1]s.dataset.seen === 'y' && %[1]s.open`, field)) {
			t.Error("reading the details again rebuilt the pending definitions: the value opened is closed")
		}
		// The markup in it is text: no element made of it, nothing run.
		if made := eval[bool](t, bt, `[...document.querySelectorAll('img')].some(i => i.getAttribute('src') === 'x') || document.body.dataset.injected !== undefined`); made {
			t.Fatal("a definition's markup became an element of the page")
		}
		if !eval[bool](t, bt, fmt.Sprintf(`%s.querySelector('.new').textContent.includes('<img src=x onerror=')`, field)) {
			t.Fatal("the markup in echo's description is not shown as text")
		}
		// The new tool, whole.
		bt.waitFor(t, "reverse's whole definition", fmt.Sprintf(`%s.querySelector('[data-tool=reverse] [data-path=description]').textContent.includes('Returns the given text reversed.') && %[1]s.querySelector('[data-tool=reverse] [data-path=inputSchema]').textContent.includes('"required"')`, detail))
		bt.do(t, "approve all", chromedp.Click(chromedp.CSS(`tbody[data-server="pinned"] button[aria-label="Approve every pending definition of pinned"]`)))
		bt.waitFor(t, "the approval said", `document.getElementById('notice').textContent.startsWith('Approved ')`)
		status, body = authed(t, "GET", base, token, "/api/servers/pinned")
		var d struct {
			Definitions struct{ Pending []json.RawMessage }
		}
		if err := json.Unmarshal([]byte(body), &d); status != 200 || err != nil || len(d.Definitions.Pending) != 0 {
			t.Fatalf("pinned after the approval: %d %s", status, body)
		}
		bt.waitFor(t, "no pending definitions left on the page", fmt.Sprintf(`!%s.querySelector('tr.detail').textContent.includes('Pending definitions')`, row("pinned")))
		bt.do(t, "collapse pinned", chromedp.Click(chromedp.CSS(`tbody[data-server="pinned"] td.name button`)))
	})

	t.Run("phone width", func(t *testing.T) {
		bt.do(t, "a phone's viewport", chromedp.EmulateViewport(390, 844))
		bt.waitFor(t, "laid out for the width", `window.innerWidth === 390`)
		if w := eval[float64](t, bt, `document.documentElement.scrollWidth`); w > 390 {
			t.Errorf("the page is %v px wide on a 390 px screen", w)
		}
		bt.do(t, "back to a desktop viewport", chromedp.EmulateViewport(1280, 900))
	})

	if out := os.Getenv("MCPVISOR_DASHBOARD_SCREENSHOT"); out != "" {
		t.Run("screenshot", func(t *testing.T) {
			for _, c := range [][2]string{{"delta", "stop"}, {"gamma", "sleep"}} {
				authed(t, "POST", base, token, "/api/servers/"+c[0]+"/"+c[1])
			}
			runBin(t, "call", "beta", "echo", "--arg", "text=hello", "--addr", strings.TrimPrefix(base, "http://"), "--token-file", tokenFile)
			bt.waitFor(t, "varied states", fmt.Sprintf(`%s.dataset.state === 'stopped'`, row("delta")))
			bt.do(t, "a wide desktop viewport", chromedp.EmulateViewport(1440, 900))
			bt.do(t, "collapse gamma", chromedp.Click(chromedp.CSS(`tbody[data-server="gamma"] td.name button`)))
			bt.do(t, "collapse alpha", chromedp.Click(chromedp.CSS(`tbody[data-server="alpha"] td.name button`)))
			time.Sleep(3 * time.Second) // let the poll show a rate, and relative times tick
			bt.screenshot(t, out)
		})
	}

	if errs := bt.consoleErrors(); len(errs) > 0 {
		t.Errorf("the dashboard reported console errors or exceptions:\n%s", strings.Join(errs, "\n"))
	}
}

// paintTiming logs the page's first contentful paint, its
// DOMContentLoaded and load times and the bytes it transferred, from the
// browser's performance timing, and holds the paint to a generous sanity
// bound (5 s): the numbers are reported, not asserted.
func paintTiming(t *testing.T, bt *browserTab, what string) {
	t.Helper()
	bt.waitFor(t, what+": painted", `performance.getEntriesByName('first-contentful-paint').length > 0`)
	timing := eval[map[string]float64](t, bt, `(() => {
		const n = performance.getEntriesByType('navigation')[0];
		const p = performance.getEntriesByName('first-contentful-paint')[0] || performance.getEntriesByName('first-paint')[0];
		return {fcp: p ? p.startTime : -1, dcl: n.domContentLoadedEventEnd, load: n.loadEventEnd,
			transfer: performance.getEntriesByType('resource').reduce((a, r) => a + r.transferSize, n.transferSize)};
	})()`)
	t.Logf("%s: first contentful paint %.1f ms, DOMContentLoaded %.1f ms, load %.1f ms, %.0f bytes transferred", what, timing["fcp"], timing["dcl"], timing["load"], timing["transfer"])
	if timing["fcp"] <= 0 || timing["fcp"] > 5000 {
		t.Errorf("%s: first contentful paint at %.1f ms (sanity bound 5 s)", what, timing["fcp"])
	}
}

// waitRunningAuthed waits until every named server runs.
func waitRunningAuthed(t *testing.T, base, token string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		all := serverPIDs(t, base, token)
		n := 0
		for _, name := range names {
			if all[name][0] == "running" {
				n++
			}
		}
		if n == len(names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not all running: %v", all)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The dashboard sits behind the same Host and Origin checks as the API on
// the real binary, and holds nothing without the token: the page and its
// files load, /api/* answers 401; a rebinding Host or a foreign Origin is
// refused (403) on the page as on the API; any other path is behind the
// token too.
func TestDashboardGuard(t *testing.T) {
	base, token, _, _ := dashboardFleet(t)
	for _, c := range []struct {
		path         string
		host, origin string
		auth         bool
		status       int
	}{
		{"/", "", "", false, 200},
		{"/ui/app.js", "", "", false, 200},
		{"/api/servers", "", "", false, 401},
		{"/api/events", "", "", false, 401},
		{"/", "evil.example", "", false, 403},
		{"/api/servers", "evil.example", "", true, 403},
		{"/", "", "https://evil.example", false, 403},
		{"/ui/app.js", "", "https://evil.example", false, 403},
		{"/api/servers", "", "https://evil.example", true, 403},
		{"/", "", base, false, 200},
		{"/api/servers", "", base, true, 200},
		{"/nope", "", "", false, 401},
		{"/nope", "", "", true, 404},
	} {
		req, _ := http.NewRequest("GET", base+c.path, nil)
		if c.host != "" {
			req.Host = c.host
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		if c.auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("GET %s (Host %q, Origin %q, token %v): %d %q, want %d", c.path, c.host, c.origin, c.auth, resp.StatusCode, b, c.status)
		}
		if c.path == "/" && resp.StatusCode == 200 && (strings.Contains(string(b), token) || resp.Header.Get("Content-Security-Policy") == "") {
			t.Errorf("GET /: the page quotes the token or has no policy")
		}
	}
}

// Element ids the dashboard derives from server names are unique: names
// that differ only in characters an id-safe rewrite would replace (a.b
// and a_b) get ids of their own, and each name's button controls its own
// detail row.
func TestDashboardIDs(t *testing.T) {
	browser := newBrowser(t)
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"a.b":{"command":%[1]q},"a_b":{"command":%[1]q},"a-b":{"command":%[1]q}}}`, fixture))
	stopAtCleanup(t, s)
	bt := newTab(t, browser)
	bt.do(t, "open the dashboard", chromedp.Navigate(s.base+"/"))
	bt.waitFor(t, "every server listed", `document.querySelectorAll('tbody[data-server]').length === 3`)
	for _, name := range []string{"a.b", "a_b", "a-b"} {
		eval[bool](t, bt, row(name)+`.querySelector('td.name button').click() === undefined`) // the layout shifts while the servers learn their tools: no pointer
		bt.waitFor(t, name+" expanded", row(name)+`.querySelector('td.name button').getAttribute('aria-expanded') === 'true'`)
	}
	for _, name := range []string{"a.b", "a_b", "a-b"} {
		expr := fmt.Sprintf(`(() => { const b = %s.querySelector('td.name button'); const d = document.getElementById(b.getAttribute('aria-controls')); return d !== null && d.closest('tbody') === %[1]s && !d.hidden; })()`, row(name))
		if !eval[bool](t, bt, expr) {
			t.Errorf("%s's button controls %s: %s", name, eval[string](t, bt, row(name)+".querySelector('td.name button').getAttribute('aria-controls')"), eval[string](t, bt, row(name)+".outerHTML"))
		}
	}
	if dup := eval[[]string](t, bt, `(() => { const seen = new Set(), dup = []; for (const e of document.querySelectorAll('[id]')) { if (seen.has(e.id)) dup.push(e.id); seen.add(e.id); } return dup; })()`); len(dup) > 0 {
		t.Errorf("ids used twice: %v", dup)
	}
	if errs := bt.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}

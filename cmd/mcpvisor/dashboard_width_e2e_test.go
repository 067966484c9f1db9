package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// Long server names, as people name them: one for each state and thing a
// row shows.
const (
	wideRunning  = "github-enterprise-readonly-mirror-production-eu-west-1"
	wideClients  = "postgres-analytics-warehouse-replica.internal.example.com"
	wideFailed   = "knowledge-base-connector-acme-corporation-enterprise-edition"
	wideCrashing = "slack-workspace-notifications-bridge-for-incident-response"
	wideStarting = "kubernetes-cluster-inspector-staging-us-central1-a"
	wideStopped  = "jira-cloud-issue-tracker-sync-for-platform-engineering"
	wideDormant  = "filesystem-shared-team-documents-and-design-assets"
	widePinned   = "sentry-error-monitoring-pinned-tool-definitions-review"
	wideWarned   = "notion-workspace-pages-and-databases-connector-for-research"
)

// widePlain are more servers, running, so that the table is as long as a
// real one.
var widePlain = []string{"brave-search-with-safe-search-and-news-results", "puppeteer-headless-browser-automation",
	"memory-knowledge-graph-for-long-running-agents", "sequential-thinking-planner", "everything-reference-server-for-testing",
	"google-drive-and-sheets-connector-for-finance-team"}

// wideClientNames are the clients of wideClients: more than fit.
var wideClientNames = []string{"Claude Desktop Enterprise Managed Deployment", "cursor-vscode-nightly-insiders-build", "Zed Preview Channel Edition"}

// wideFleet serves the worst case for the width of the server table:
// every server with a long name, in every state it can hold (running,
// starting, failed with a long error and with its stderr, stopped,
// dormant, with pending definitions, with a warning), clients with long
// names, a command that is a long path. It returns the base URL once
// they are all so.
func wideFleet(t *testing.T) string {
	fixture := testserver.Build(t)
	variant, lost := filepath.Join(t.TempDir(), "variant"), filepath.Join(t.TempDir(), "lost")
	for _, f := range []string{variant, lost} {
		if err := os.WriteFile(f, []byte("0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	launches := map[string]any{
		wideRunning: map[string]any{"command": fixture, "args": []string{"-stderr-lines", "3"}, "eager": true, "idleTimeout": "0"},
		wideClients: map[string]any{"command": fixture, "eager": true, "idleTimeout": "0"},
		// A command that is not there: the error names its long path.
		wideFailed: map[string]any{"command": "/nix/store/0a8f3kq2v9c7d1m5x6z4b8n2p0r7s3t9-acme-enterprise-knowledge-base-connector-2026.11.30-rc4/opt/mcp-servers/vendor/acme-corporation/enterprise-knowledge-base-connector/releases/2026.11.30-rc4/libexec/linux-amd64/knowledge-base-mcp-server-with-vector-index-and-hybrid-search",
			"args": []string{"--workspace", "/srv/shared/knowledge-base/acme-corporation/engineering", "--index-batch-size", "512"}, "eager": true, "restart": map[string]any{"maxAttempts": 1}},
		// Crashes at start, writing to stderr: failed, its error
		// quoting its stderr.
		wideCrashing: map[string]any{"command": fixture, "args": []string{"-crash-at-start", "-stderr-lines", "4"}, "eager": true},
		wideStarting: map[string]any{"command": fixture, "args": []string{"-slow-start", "1h"}, "eager": true, "initTimeout": "2h"},
		wideStopped:  map[string]any{"command": fixture, "eager": true, "idleTimeout": "0"},
		wideDormant:  map[string]any{"command": fixture, "eager": true, "idleTimeout": "0"},
		widePinned:   map[string]any{"command": fixture, "args": []string{"-tools-variant-file", variant}, "pin": true, "eager": true, "idleTimeout": "0"},
		// Comes back listing no tools: a warning, long, under its name.
		wideWarned: map[string]any{"command": fixture, "args": []string{"-tools-variant-file", lost}, "eager": true, "idleTimeout": "0"},
	}
	for _, n := range widePlain {
		launches[n] = map[string]any{"command": fixture, "eager": true, "idleTimeout": "0"}
	}
	cfg, err := json.Marshal(map[string]any{"mcpServers": launches})
	if err != nil {
		t.Fatal(err)
	}
	s := startServe(t, string(cfg))
	stopAtCleanup(t, s)
	base := s.base
	running := append([]string{wideRunning, wideClients, wideStopped, wideDormant, widePinned, wideWarned}, widePlain...)
	waitRunning(t, base, running...)
	for _, name := range wideClientNames {
		echoN(t, connectAs(t, base+"/servers/"+wideClients+"/mcp", name, "1.0.0", false), 1)
	}
	echoN(t, connectAs(t, base+"/servers/"+wideRunning+"/mcp", "claude-code-enterprise-managed-deployment", "2.0.0", false), 1)
	// pinned: its tools change at a restart, and are held back; warned:
	// it lists none after its restart.
	if err := os.WriteFile(variant, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lost, []byte("2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, a := range [][2]string{{widePinned, "restart"}, {wideWarned, "restart"}, {wideStopped, "stop"}, {wideDormant, "sleep"}} {
		resp, err := http.Post(base+"/api/servers/"+a[0]+"/"+a[1]+"?timeout=30s", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d", a[1], a[0], resp.StatusCode)
		}
	}
	want := map[string]string{wideFailed: "failed", wideCrashing: "failed", wideStarting: "starting", wideStopped: "stopped", wideDormant: "dormant"}
	for deadline := time.Now().Add(30 * time.Second); ; {
		all := servers(t, base)
		ok := all[widePinned].PendingDefinitions > 0 && all[wideWarned].Warning != ""
		for name, state := range want {
			ok = ok && all[name].State == state
		}
		if ok {
			return base
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet never reached its states: %+v", all)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fitsWidth is the JavaScript that measures, at the page's width, what
// does not fit: the page scrolling sideways, the table wider than its
// box, a server's name, pending count, state, action buttons or the line
// under its row cut off or out of view. First it gives the starting
// server's badge the widest state, which no server holds still (a crash
// loop is restarting only while it waits out a delay): in the same task,
// so that no refresh of the page undoes it before it is measured.
var fitsWidth = `(() => {
	document.querySelector('tbody[data-server="` + wideStarting + `"] .badge').textContent = 'restarting';
	const out = [], page = document.scrollingElement, box = document.querySelector('section.servers'), table = document.getElementById('servers');
	if (page.scrollWidth > page.clientWidth) out.push('the page scrolls sideways: ' + page.scrollWidth + ' > ' + page.clientWidth);
	const cs = getComputedStyle(box), inner = box.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
	if (table.scrollWidth > inner) out.push('the table is ' + table.scrollWidth + ' px wide in a box of ' + inner);
	if (box.scrollWidth > box.clientWidth) out.push('the table box scrolls sideways: ' + box.scrollWidth + ' > ' + box.clientWidth);
	const right = Math.min(page.clientWidth, box.getBoundingClientRect().right);
	for (const tb of document.querySelectorAll('#servers tbody[data-server]')) {
		const name = tb.dataset.server, row = tb.querySelector('tr.row');
		for (const e of tb.querySelectorAll('td.name button, span.pending:not([hidden]), .badge, td.act button:not([hidden]), tr.note:not([hidden]) > td')) {
			const r = e.getBoundingClientRect();
			if (e.scrollWidth > e.clientWidth + 1 || r.right > right + 0.5) out.push(name + ': ' + (e.getAttribute('aria-label') || e.textContent) + ' cut off (' + e.scrollWidth + '/' + e.clientWidth + ' px, right edge ' + r.right + ' of ' + right + ')');
		}
		if (row.querySelector('td.name button').textContent !== name) out.push(name + ': shown as ' + row.querySelector('td.name button').textContent);
	}
	return out;
})()`

// TestDashboardFitsALaptop: the server table of a fleet at its widest
// (long names, long errors and stderr, long commands, clients with long
// names, every state, pending definitions, a warning) fits a 1280×800
// window without scrolling sideways, every name, state and action button
// whole and in view; a failed server's error shows two lines under its
// row, all of it in their title and once the row is open; and the table
// fits so with two rows open (a long command, stderr), at 1024 px and at
// 920 px, the narrowest that shows a table.
// MCPVISOR_DASHBOARD_WIDE_SCREENSHOT=PREFIX writes PREFIX-1280.png and
// PREFIX-1024.png.
func TestDashboardFitsALaptop(t *testing.T) {
	browser := newBrowser(t)
	base := wideFleet(t)
	bt := newTab(t, browser)
	bt.do(t, "a laptop's window", chromedp.EmulateViewport(1280, 800))
	bt.do(t, "open the dashboard", chromedp.Navigate(base+"/"))
	n := 9 + len(widePlain)
	bt.waitFor(t, "every server listed", fmt.Sprintf(`document.querySelectorAll('tbody[data-server]').length === %d`, n))
	bt.waitFor(t, "the states shown", fmt.Sprintf(`%s.dataset.state === 'failed' && %s.dataset.state === 'failed' && %s.dataset.state === 'stopped' && %s.querySelector('span.pending').textContent !== '' && %s.querySelector('td.clients').title.includes('zed-preview-channel-edition') && (%[6]s.querySelector('.warning') || {}).textContent.includes('accept-lost')`,
		row(wideCrashing), row(wideFailed), row(wideStopped), row(widePinned), row(wideClients), row(wideWarned)))
	failedErr := servers(t, base)[wideFailed].LastError
	if len(failedErr) < 300 { // more than two lines of the table's width
		t.Fatalf("the failed server's error is not a long one: %q", failedErr)
	}
	shot := func(name string) {
		if prefix := os.Getenv("MCPVISOR_DASHBOARD_WIDE_SCREENSHOT"); prefix != "" {
			bt.screenshot(t, prefix+"-"+name)
		}
	}
	check := func(what string) {
		t.Helper()
		if bad := eval[[]string](t, bt, fitsWidth); len(bad) > 0 {
			t.Errorf("%s:\n%s", what, strings.Join(bad, "\n"))
		}
	}
	check("at 1280×800")
	shot("1280.png")
	// The failed server's error: two lines under its row, all of it in
	// their title, and once the row is open.
	errLine := row(wideFailed) + `.querySelector('tr.note .clamp')`
	if title := eval[string](t, bt, errLine+`.title`); title != failedErr {
		t.Errorf("the failed server's error line says %q, the API %q", title, failedErr)
	}
	if !eval[bool](t, bt, errLine+`.scrollHeight > `+errLine+`.clientHeight`) {
		t.Error("the failed server's error line shows all of a long error: it is to show two lines")
	}
	if w := eval[string](t, bt, row(wideWarned)+`.querySelector('tr.note .warning').textContent`); !strings.Contains(w, "accept-lost "+wideWarned) {
		t.Errorf("the warned server's line says %q", w)
	}
	bt.do(t, "open the failed server", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tbody[data-server=%q] td.name button`, wideFailed))))
	bt.waitFor(t, "its whole error and its launch", fmt.Sprintf(`%s.textContent === %q && %[1]s.scrollHeight <= %[1]s.clientHeight && %[3]s.querySelector('tr.detail code') !== null && %[3]s.querySelector('tr.detail code').textContent.includes('knowledge-base-mcp-server-with-vector-index')`, errLine, failedErr, row(wideFailed)))
	bt.do(t, "open the crashing server", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tbody[data-server=%q] td.name button`, wideCrashing))))
	bt.waitFor(t, "its stderr", fmt.Sprintf(`%s.querySelector('pre.stderr').textContent.includes('crashing at start')`, row(wideCrashing)))
	check("at 1280×800, details open")
	bt.do(t, "a 1024 px window", chromedp.EmulateViewport(1024, 768))
	bt.waitFor(t, "laid out for the width", `window.innerWidth === 1024`)
	check("at 1024×768, details open")
	shot("1024.png")
	// The narrowest window that shows a table (narrower, each server is
	// a card).
	bt.do(t, "a 920 px window", chromedp.EmulateViewport(920, 768))
	bt.waitFor(t, "laid out for the width", `window.innerWidth === 920 && getComputedStyle(document.querySelector('#servers thead')).display !== 'none'`)
	check("at 920×768, details open")
	if errs := bt.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}

//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/revision"
)

// The compatibility run (make compat; outside make test: it needs the npm
// registry once, and takes minutes): popular npm stdio servers, pinned,
// installed once into a cache of the target's own, each run directly
// (npx -y PKG@VER, a 2025-11-25 client that declares no capabilities, and
// a 2026-07-28 one for a server that speaks it) and through one mcpvisor
// serve configured as users write it (npx -y PKG@VER, default settings).
// Through mcpvisor, on /servers/NAME/mcp and /mcp, with a 2025-11-25
// session and 2026-07-28 requests, the initialize result (of
// /servers/NAME/mcp: /mcp's is mcpvisor's own), the lists and a benign
// call must be JSON-equal to what the server said directly — a modern
// result to the direct modern one, or, for a server that speaks only the
// legacy revisions, to the direct legacy one once the members only the
// modern era has are left out (revision.ToLegacyResult), those the modern
// era requires being there. Every round but the first runs on a server
// mcpvisor put to sleep and woke for it.
//
// Environment: MCPVISOR_COMPAT=1 enables it; MCPVISOR_COMPAT_DIR is the
// cache (default .deps/compat); the report goes to MCPVISOR_COMPAT_OUT
// (default bin/compat/report.txt).

// compatServer is one server of the run.
type compatServer struct {
	name, pkg string
	args      []string          // after the package; "$DIR" is a directory of the run's own
	env       map[string]string // dummy credentials its README asks for
	tool      string            // the benign call
	toolArgs  map[string]any
	why       string // why it is in the run
	// sharedTools are tools it lists only to a client that declared a
	// capability, and so lists to mcpvisor, which declares every one it
	// carries to a shared server (docs/configuration.md: the trade-off of
	// sharing): listed through mcpvisor and not directly, and nothing else.
	sharedTools []string
}

// compatServers are chosen for what they exercise: the reference servers
// (every capability kind; a server that asks for roots), the two most
// downloaded servers that ask for roots after each start (playwright,
// chrome-devtools), a dual-era server (context7), and the most used API
// wrappers, which need only a key to list their tools. Calls that reach
// the network fail at once here, the same way directly and through
// mcpvisor: a benign call.
var compatServers = []compatServer{
	{name: "everything", pkg: "@modelcontextprotocol/server-everything@2026.8.31", tool: "echo", toolArgs: map[string]any{"message": "hi"},
		why:         "the reference server: tools, prompts, resources, templates, completions, capability-gated tools",
		sharedTools: []string{"get-roots-list", "trigger-elicitation-request", "trigger-sampling-request"}},
	{name: "filesystem", pkg: "@modelcontextprotocol/server-filesystem@2026.8.31", args: []string{"$DIR"}, tool: "list_allowed_directories", toolArgs: map[string]any{},
		why: "asks for roots after each start; 1.1 M downloads a month"},
	{name: "memory", pkg: "@modelcontextprotocol/server-memory@2026.8.31", env: map[string]string{"MEMORY_FILE_PATH": "$DIR/memory.jsonl"}, tool: "read_graph", toolArgs: map[string]any{},
		why: "a stateful server with a file of its own"},
	{name: "sequential-thinking", pkg: "@modelcontextprotocol/server-sequential-thinking@2026.8.31", tool: "sequentialthinking",
		toolArgs: map[string]any{"thought": "a", "thoughtNumber": 1, "totalThoughts": 1, "nextThoughtNeeded": false},
		why:      "state in memory: a call counts the thoughts of the process"},
	{name: "context7", pkg: "@upstash/context7-mcp@4.1.1", tool: "resolve-library-id", toolArgs: map[string]any{"libraryName": "react", "query": "hooks"},
		why: "speaks 2026-07-28 and the legacy revisions (dual-era); 1.4 M downloads a month"},
	{name: "playwright", pkg: "@playwright/mcp@0.0.83", tool: "browser_close", toolArgs: map[string]any{},
		why: "the most downloaded server (6.3 M a month); asks for roots after each start"},
	{name: "chrome-devtools", pkg: "chrome-devtools-mcp@1.11.0", tool: "list_pages", toolArgs: map[string]any{},
		why: "asks for roots after each start; logging capability"},
	{name: "notion", pkg: "@notionhq/notion-mcp-server@2.5.2", env: map[string]string{"NOTION_TOKEN": "ntn_compat_dummy"}, tool: "API-get-self", toolArgs: map[string]any{},
		why: "an OpenAPI wrapper whose failed call is a JSON-RPC error"},
	{name: "brave-search", pkg: "@brave/brave-search-mcp-server@2.1.4", env: map[string]string{"BRAVE_API_KEY": "BSA_compat_dummy"}, tool: "brave_web_search", toolArgs: map[string]any{"query": "mcp"},
		why: "an API wrapper with logging"},
	{name: "tavily", pkg: "tavily-mcp@0.2.22", env: map[string]string{"TAVILY_API_KEY": "tvly-compat-dummy"}, tool: "tavily_search", toolArgs: map[string]any{"query": "mcp"},
		why: "an API wrapper"},
	{name: "firecrawl", pkg: "firecrawl-mcp@3.26.0", env: map[string]string{"FIRECRAWL_API_KEY": "fc-compat-dummy"}, tool: "firecrawl_scrape", toolArgs: map[string]any{"url": "https://example.com"},
		why: "an API wrapper with completions and logging"},
}

// compatMeta is the _meta of the run's 2026-07-28 requests: a client that
// declares no capabilities.
const compatMeta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"compat","version":"1"}}`

// compatLists are the lists compared, with the capability that offers each
// and the member that holds its items.
var compatLists = []struct{ method, capability, items string }{
	{"tools/list", "tools", "tools"},
	{"prompts/list", "prompts", "prompts"},
	{"resources/list", "resources", "resources"},
	{"resources/templates/list", "resources", "resourceTemplates"},
}

// compatRecord is what one client saw of one server: each exchange's
// result or error, as JSON, by what it asked ("initialize", a list
// method, "call").
type compatRecord map[string]json.RawMessage

func TestCompat(t *testing.T) {
	if os.Getenv("MCPVISOR_COMPAT") == "" {
		t.Skip("set MCPVISOR_COMPAT=1 to run the compatibility run against real npm servers (make compat)")
	}
	root, _ := filepath.Abs("../..")
	dir := os.Getenv("MCPVISOR_COMPAT_DIR")
	if dir == "" {
		dir = filepath.Join(root, ".deps", "compat")
	}
	out := os.Getenv("MCPVISOR_COMPAT_OUT")
	if out == "" {
		out = filepath.Join(root, "bin", "compat", "report.txt")
	}
	cache := filepath.Join(dir, "npm-cache")
	t.Setenv("npm_config_cache", cache)
	t.Setenv("npm_config_update_notifier", "false")
	t.Setenv("npm_config_fund", "false")
	compatInstall(t, dir)
	work := t.TempDir()

	expand := func(s string, srv compatServer) string {
		d := filepath.Join(work, srv.name)
		_ = os.MkdirAll(d, 0o755)
		return strings.ReplaceAll(s, "$DIR", d)
	}
	argv := func(srv compatServer) []string {
		a := []string{"-y", srv.pkg}
		for _, x := range srv.args {
			a = append(a, expand(x, srv))
		}
		return a
	}
	envOf := func(srv compatServer) map[string]string {
		m := map[string]string{}
		for k, v := range srv.env {
			m[k] = expand(v, srv)
		}
		return m
	}

	// Directly.
	direct := map[string][2]compatRecord{} // legacy, modern (nil: the server speaks no modern revision)
	for _, srv := range compatServers {
		legacy := compatDirect(t, srv, argv(srv), envOf(srv), false)
		modern := compatDirect(t, srv, argv(srv), envOf(srv), true)
		direct[srv.name] = [2]compatRecord{legacy, modern}
	}

	// Through mcpvisor, configured as users write it.
	cfg := map[string]any{}
	for _, srv := range compatServers {
		cfg[srv.name] = map[string]any{"command": "npx", "args": argv(srv), "env": envOf(srv)}
	}
	cfgJSON, _ := json.Marshal(map[string]any{"mcpServers": cfg})
	s := startServe(t, string(cfgJSON))
	stopAtCleanup(t, s)
	addr := strings.TrimPrefix(s.base, "http://")

	type scenario struct {
		endpoint string // "servers" or "mcp"
		modern   bool
	}
	scenarios := []scenario{{"servers", false}, {"mcp", false}, {"servers", true}, {"mcp", true}}
	type cell struct {
		diffs []string
		woke  bool
	}
	results := map[string][]cell{}
	for _, srv := range compatServers {
		for i, sc := range scenarios {
			woke := false
			if i > 0 {
				// Asleep, then woken by this round's first request.
				if code, _, stderr := runBin(t, "sleep", srv.name, "--addr", addr); code == 0 {
					woke = true
				} else if !strings.Contains(stderr, "not running") {
					t.Errorf("%s: sleep: exit %d %s", srv.name, code, stderr)
				}
			}
			got := compatThrough(t, s.base, srv, sc.endpoint, sc.modern)
			want := direct[srv.name][0]
			if sc.modern && direct[srv.name][1] != nil {
				want = direct[srv.name][1]
			}
			diffs := compatCompare(srv, want, got, sc.endpoint, sc.modern, sc.modern && direct[srv.name][1] == nil)
			results[srv.name] = append(results[srv.name], cell{diffs, woke})
			for _, d := range diffs {
				t.Errorf("%s, /%s, %s: %s", srv.name, sc.endpoint, eraName(sc.modern), d)
			}
		}
	}

	// The report.
	var b strings.Builder
	fmt.Fprintf(&b, "mcpvisor compatibility run, %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Each server run directly (npx -y PKG@VER, a 2025-11-25 client declaring no capabilities; a 2026-07-28 client too for a server that speaks it)\n")
	fmt.Fprintf(&b, "and through one mcpvisor serve (npx -y PKG@VER, default settings); initialize (on /servers/NAME/mcp), every list and one call compared as JSON.\n")
	fmt.Fprintf(&b, "Columns: endpoint and era; every round but the first on a server put to sleep and woken for it. = identical.\n\n")
	fmt.Fprintf(&b, "%-20s %-52s %-6s", "server", "package", "eras")
	for _, sc := range scenarios {
		fmt.Fprintf(&b, " %-18s", "/"+sc.endpoint+" "+eraName(sc.modern))
	}
	b.WriteString("\n")
	same := 0
	for _, srv := range compatServers {
		eras := "legacy"
		if direct[srv.name][1] != nil {
			eras = "dual"
		}
		fmt.Fprintf(&b, "%-20s %-52s %-6s", srv.name, srv.pkg, eras)
		all := true
		for _, c := range results[srv.name] {
			mark := "="
			if len(c.diffs) > 0 {
				mark = fmt.Sprintf("%d differ", len(c.diffs))
				all = false
			}
			if c.woke {
				mark += " (woken)"
			}
			fmt.Fprintf(&b, " %-18s", mark)
		}
		b.WriteString("\n")
		if all {
			same++
		}
	}
	fmt.Fprintf(&b, "\n%d of %d servers behave identically through mcpvisor, counting as identical what mcpvisor says on its own account:\n", same, len(compatServers))
	b.WriteString("  - a server's tools listed only to a client that declared a capability, which mcpvisor declares to a shared server (sharing's trade-off, docs/configuration.md):\n")
	for _, srv := range compatServers {
		if len(srv.sharedTools) > 0 {
			fmt.Fprintf(&b, "    %s lists %s through mcpvisor and not directly (checked: exactly these)\n", srv.name, strings.Join(srv.sharedTools, ", "))
		}
	}
	b.WriteString("  - server/discover's supportedVersions on /servers/NAME/mcp: mcpvisor serves every revision there (checked: 2026-07-28 listed);\n")
	b.WriteString("  - a 2026-07-28 result's ttlMs, cacheScope and _meta serverInfo: each answerer's own (checked: those the era requires present);\n")
	b.WriteString("  - /mcp's initialize, and resources there of servers that offer none: mcpvisor's aggregate.\n")
	b.WriteString("\nWhy each server is in the run:\n")
	for _, srv := range compatServers {
		fmt.Fprintf(&b, "  %-20s %s (call: %s)\n", srv.name, srv.why, srv.tool)
	}
	for _, srv := range compatServers {
		for i, c := range results[srv.name] {
			for _, d := range c.diffs {
				fmt.Fprintf(&b, "DIFF %s /%s %s: %s\n", srv.name, scenarios[i].endpoint, eraName(scenarios[i].modern), d)
			}
		}
	}
	t.Log("\n" + b.String())
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err == nil {
		_ = os.WriteFile(out, []byte(b.String()), 0o644)
		t.Logf("report: %s", out)
	}
}

func eraName(modern bool) string {
	if modern {
		return "2026-07-28"
	}
	return "2025-11-25"
}

// compatInstall fills the run's npm cache with every pinned package, once
// (a stamp names what it holds), as npx -y fills it.
func compatInstall(t *testing.T, dir string) {
	var pkgs []string
	for _, s := range compatServers {
		pkgs = append(pkgs, s.pkg)
	}
	stamp := filepath.Join(dir, "stamp")
	want := strings.Join(pkgs, "\n") + "\n"
	if b, err := os.ReadFile(stamp); err == nil && string(b) == want {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		t.Logf("installing %s into %s", p, dir)
		cmd := exec.Command("npm", "exec", "--yes", "--package="+p, "--", "node", "-e", "0")
		cmd.Dir = "/" // no npm project there: npx installs into its cache
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm exec %s: %v\n%s", p, err, b)
		}
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
}

// compatDirect runs srv directly, as npx -y runs it, and records what a
// 2025-11-25 client that declares no capabilities sees (modern false) or
// what a 2026-07-28 client sees (nil when the server does not answer
// server/discover as one).
func compatDirect(t *testing.T, srv compatServer, args []string, env map[string]string, modern bool) compatRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npx", args...)
	cmd.Dir = "/"
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &stdioPeer{t: t, name: srv.name, pending: map[string]chan json.RawMessage{}}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	p.in = stdin
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", srv.name, err)
	}
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	go p.read(stdout)
	rec := compatRecord{}
	meta := func(params string) string {
		if !modern {
			return params
		}
		if params == "{}" {
			return `{"_meta":` + compatMeta + `}`
		}
		return strings.TrimSuffix(params, "}") + `,"_meta":` + compatMeta + `}`
	}
	var caps map[string]json.RawMessage
	if modern {
		d := p.call(ctx, "server/discover", meta("{}"))
		var res struct {
			SupportedVersions []string                   `json:"supportedVersions"`
			Capabilities      map[string]json.RawMessage `json:"capabilities"`
		}
		if json.Unmarshal(resultOf(d), &res) != nil || !slices.Contains(res.SupportedVersions, revision.ModernVersion) {
			return nil
		}
		rec["initialize"] = d
		caps = res.Capabilities
	} else {
		init := p.call(ctx, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"compat","version":"1"}}`)
		rec["initialize"] = init
		p.notify(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		var res struct {
			Capabilities map[string]json.RawMessage `json:"capabilities"`
		}
		_ = json.Unmarshal(resultOf(init), &res)
		caps = res.Capabilities
	}
	for _, l := range compatLists {
		if _, ok := caps[l.capability]; ok {
			rec[l.method] = compatAllPages(func(cursor string) json.RawMessage {
				params := "{}"
				if cursor != "" {
					params = `{"cursor":` + mustJSONString(cursor) + `}`
				}
				return p.call(ctx, l.method, meta(params))
			}, l.items)
		}
	}
	callParams, _ := json.Marshal(map[string]any{"name": srv.tool, "arguments": srv.toolArgs})
	rec["call"] = p.call(ctx, "tools/call", meta(string(callParams)))
	return rec
}

func mustJSONString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// compatAllPages asks for every page of a list, and is the first page's
// response with every page's items in it (no cursor): what a client that
// reads the whole list sees.
func compatAllPages(ask func(cursor string) json.RawMessage, items string) json.RawMessage {
	first := ask("")
	all := []json.RawMessage{}
	resp := first
	for range 100 {
		var page map[string]json.RawMessage
		if json.Unmarshal(resultOf(resp), &page) != nil {
			return first // an error: as it came
		}
		var its []json.RawMessage
		_ = json.Unmarshal(page[items], &its)
		all = append(all, its...)
		var next string
		if json.Unmarshal(page["nextCursor"], &next) != nil || next == "" {
			break
		}
		resp = ask(next)
	}
	var env map[string]json.RawMessage
	_ = json.Unmarshal(first, &env)
	var res map[string]json.RawMessage
	_ = json.Unmarshal(env["result"], &res)
	res[items], _ = json.Marshal(all)
	delete(res, "nextCursor")
	env["result"], _ = json.Marshal(res)
	out, _ := json.Marshal(env)
	return out
}

// resultOf is the result member of a response ({"result":…} or
// {"error":…}), nil for an error.
func resultOf(resp json.RawMessage) json.RawMessage {
	var m struct {
		Result json.RawMessage `json:"result"`
	}
	_ = json.Unmarshal(resp, &m)
	return m.Result
}

// stdioPeer is a minimal JSON-RPC client of a stdio server: it answers the
// server's requests as a client that declared no capabilities (Method not
// found) and drops its notifications.
type stdioPeer struct {
	t       *testing.T
	name    string
	in      io.Writer
	mu      sync.Mutex
	seq     int
	pending map[string]chan json.RawMessage
	asked   []string
}

func (p *stdioPeer) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		line := append([]byte(nil), sc.Bytes()...)
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		switch {
		case m.Method != "" && m.ID != nil:
			p.mu.Lock()
			p.asked = append(p.asked, m.Method)
			p.mu.Unlock()
			p.notify(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":"Method not found"}}`)
		case m.Method == "" && m.ID != nil:
			p.mu.Lock()
			ch := p.pending[string(m.ID)]
			delete(p.pending, string(m.ID))
			p.mu.Unlock()
			if ch != nil {
				ch <- compatEnvelope(line)
			}
		}
	}
}

// compatEnvelope is a response as compared: its result or error alone.
func compatEnvelope(line []byte) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil {
		return line
	}
	out := map[string]json.RawMessage{}
	for _, k := range []string{"result", "error"} {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	b, _ := json.Marshal(out)
	return b
}

func (p *stdioPeer) notify(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.in, line+"\n")
}

func (p *stdioPeer) call(ctx context.Context, method, params string) json.RawMessage {
	p.mu.Lock()
	p.seq++
	id := fmt.Sprint(p.seq)
	ch := make(chan json.RawMessage, 1)
	p.pending[id] = ch
	_, _ = io.WriteString(p.in, `{"jsonrpc":"2.0","id":`+id+`,"method":`+mustJSONString(method)+`,"params":`+params+"}\n")
	p.mu.Unlock()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		p.t.Errorf("%s: no answer to %s: %v", p.name, method, ctx.Err())
		return json.RawMessage(`{"error":{"code":0,"message":"no answer"}}`)
	}
}

// compatThrough records what a client sees of srv through mcpvisor at
// base: on /servers/NAME/mcp or /mcp, in a 2025-11-25 session or by
// 2026-07-28 requests.
func compatThrough(t *testing.T, base string, srv compatServer, endpoint string, modern bool) compatRecord {
	t.Helper()
	url, prefix := base+"/servers/"+srv.name+"/mcp", ""
	if endpoint == "mcp" {
		url, prefix = base+"/mcp", srv.name+"__"
	}
	h := &httpPeer{t: t, url: url}
	rec := compatRecord{}
	meta := func(params map[string]any) map[string]any {
		if modern {
			params["_meta"] = json.RawMessage(compatMeta)
		}
		return params
	}
	var caps map[string]json.RawMessage
	if modern {
		d := h.request("server/discover", meta(map[string]any{}), "", true)
		if endpoint == "servers" {
			rec["initialize"] = d
		}
		var res struct {
			Capabilities map[string]json.RawMessage `json:"capabilities"`
		}
		_ = json.Unmarshal(resultOf(d), &res)
		caps = res.Capabilities
	} else {
		init := h.request("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "compat", "version": "1"}}, "", false)
		if endpoint == "servers" {
			rec["initialize"] = init
		}
		h.notifyInitialized()
		var res struct {
			Capabilities map[string]json.RawMessage `json:"capabilities"`
		}
		_ = json.Unmarshal(resultOf(init), &res)
		caps = res.Capabilities
	}
	for _, l := range compatLists {
		if _, ok := caps[l.capability]; !ok {
			continue
		}
		resp := compatAllPages(func(cursor string) json.RawMessage {
			params := map[string]any{}
			if cursor != "" {
				params["cursor"] = cursor
			}
			return h.request(l.method, meta(params), "", modern)
		}, l.items)
		if prefix != "" && (l.items == "tools" || l.items == "prompts") {
			// Resources keep their URIs on /mcp: which are this
			// server's is told by the direct list (compatCompare).
			resp = compatOwnItems(resp, l.items, prefix)
		}
		rec[l.method] = resp
	}
	rec["call"] = h.request("tools/call", meta(map[string]any{"name": prefix + srv.tool, "arguments": srv.toolArgs}), prefix+srv.tool, modern)
	h.close()
	return rec
}

// compatOwnItems is a list response of /mcp with only the items of one
// server (their names begin with prefix; resources are told by their
// server's name prefix too), as that server names them.
func compatOwnItems(resp json.RawMessage, items, prefix string) json.RawMessage {
	var env map[string]json.RawMessage
	if json.Unmarshal(resp, &env) != nil || env["result"] == nil {
		return resp
	}
	var res map[string]json.RawMessage
	_ = json.Unmarshal(env["result"], &res)
	var its []map[string]json.RawMessage
	_ = json.Unmarshal(res[items], &its)
	own := []map[string]json.RawMessage{}
	for _, it := range its {
		var name string
		_ = json.Unmarshal(it["name"], &name)
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		it["name"], _ = json.Marshal(strings.TrimPrefix(name, prefix))
		own = append(own, it)
	}
	res[items], _ = json.Marshal(own)
	env["result"], _ = json.Marshal(res)
	out, _ := json.Marshal(env)
	return out
}

// httpPeer is a client of one Streamable HTTP endpoint: a legacy session
// (its id once initialize answered) or 2026-07-28 requests.
type httpPeer struct {
	t       *testing.T
	url     string
	session string
	seq     int
}

func (h *httpPeer) post(body []byte, hdr map[string]string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(h.t.Context(), "POST", h.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if h.session != "" {
		req.Header.Set("Mcp-Session-Id", h.session)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 2 * time.Minute}
	return c.Do(req)
}

func (h *httpPeer) notifyInitialized() {
	resp, err := h.post([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), nil)
	if err == nil {
		resp.Body.Close()
	}
}

// request sends method and returns the response to it (result or error).
func (h *httpPeer) request(method string, params map[string]any, name string, modern bool) json.RawMessage {
	h.seq++
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": h.seq, "method": method, "params": params})
	var hdr map[string]string
	if modern {
		hdr = map[string]string{"MCP-Protocol-Version": revision.ModernVersion, "Mcp-Method": method}
		if name != "" {
			hdr["Mcp-Name"] = name
		}
	}
	resp, err := h.post(body, hdr)
	if err != nil {
		h.t.Errorf("%s %s: %v", h.url, method, err)
		return json.RawMessage(`{"error":{"code":0,"message":"no answer"}}`)
	}
	defer resp.Body.Close()
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" && method == "initialize" {
		h.session = id
	}
	want := fmt.Sprint(h.seq)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var broke error
		for data, err := range sseData(resp.Body) {
			if err != nil {
				broke = err
				break
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(data, &m) == nil && m.Method == "" && string(m.ID) == want {
				return compatEnvelope(data)
			}
		}
		h.t.Errorf("%s %s: the stream ended without the response (%v)", h.url, method, broke)
		return json.RawMessage(`{"error":{"code":0,"message":"no answer"}}`)
	}
	b, _ := io.ReadAll(resp.Body)
	return compatEnvelope(b)
}

func (h *httpPeer) close() {
	if h.session == "" {
		return
	}
	req, _ := http.NewRequestWithContext(h.t.Context(), "DELETE", h.url, nil)
	req.Header.Set("Mcp-Session-Id", h.session)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// compatCompare lists how got (through mcpvisor) differs from want
// (directly). legacyOnly: a modern client of a server that speaks only the
// legacy revisions, whose results are compared with the direct legacy
// ones once the members only the modern era has are left out (and must
// have those the modern era requires). On /mcp the initialize result is
// mcpvisor's own and not compared.
func compatCompare(srv compatServer, want, got compatRecord, endpoint string, modern, legacyOnly bool) []string {
	var diffs []string
	keys := slices.Sorted(maps.Keys(want))
	for _, k := range keys {
		if k == "initialize" && endpoint == "mcp" {
			continue
		}
		g, ok := got[k]
		if !ok {
			diffs = append(diffs, k+": not asked through mcpvisor (the capability was not offered)")
			continue
		}
		w := want[k]
		method := k
		if k == "call" {
			method = "tools/call"
		}
		if k == "initialize" && modern && legacyOnly {
			continue // mcpvisor's server/discover for a legacy server: nothing direct to compare with
		}
		if endpoint == "mcp" && (k == "resources/list" || k == "resources/templates/list") {
			g = compatSameURIs(g, w)
		}
		if k == "tools/list" && len(srv.sharedTools) > 0 {
			var extra []string
			g, extra = compatWithoutTools(g, srv.sharedTools)
			if !slices.Equal(extra, srv.sharedTools) {
				diffs = append(diffs, fmt.Sprintf("tools/list: through mcpvisor lists %v of the tools a shared server lists to a client that declared every capability, want %v", extra, srv.sharedTools))
			}
		}
		if modern && !compatRequired(g, method) {
			diffs = append(diffs, fmt.Sprintf("%s: through mcpvisor without a member the modern era requires: %s", k, clip(g)))
		}
		if k == "initialize" && modern {
			// server/discover's supportedVersions are what the endpoint
			// serves: mcpvisor serves every revision on each, the legacy
			// ones by initialize, whatever the server lists.
			var res map[string]json.RawMessage
			_ = json.Unmarshal(resultOf(g), &res)
			var versions []string
			if json.Unmarshal(res["supportedVersions"], &versions) != nil || !slices.Contains(versions, revision.ModernVersion) {
				diffs = append(diffs, "initialize: through mcpvisor, server/discover does not list "+revision.ModernVersion)
			}
			g, w = compatWithoutMember(g, "supportedVersions"), compatWithoutMember(w, "supportedVersions")
		}
		if modern {
			// The caching members are each answerer's own policy (a list
			// comes from mcpvisor's cache), and a result's serverInfo
			// names who answered: the content is compared.
			g = compatWithout(g, method, legacyOnly)
			w = compatWithout(w, method, legacyOnly)
		}
		if !jsonSame(w, g) {
			diffs = append(diffs, k+": "+compatDelta(w, g))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; ok || k == "initialize" && endpoint == "mcp" {
			continue
		}
		// /mcp offers every kind some server has: this server's part of a
		// list it does not offer must be empty (resources keep their
		// URIs there, so a server's part of them cannot be told).
		if endpoint == "mcp" && (compatEmpty(g) || k == "resources/list" || k == "resources/templates/list") {
			continue
		}
		diffs = append(diffs, k+": offered through mcpvisor only")
	}
	return diffs
}

// compatSameURIs is got, a resource list of /mcp, with only the items
// whose uri (or uriTemplate) want, the server's own list, has: /mcp keeps
// resources' URIs, and lists every server's.
func compatSameURIs(got, want json.RawMessage) json.RawMessage {
	key := func(it map[string]json.RawMessage) string { return string(it["uri"]) + string(it["uriTemplate"]) }
	items := func(resp json.RawMessage) (map[string]json.RawMessage, string, []map[string]json.RawMessage) {
		var res map[string]json.RawMessage
		_ = json.Unmarshal(resultOf(resp), &res)
		for _, name := range []string{"resources", "resourceTemplates"} {
			if v, ok := res[name]; ok {
				var its []map[string]json.RawMessage
				_ = json.Unmarshal(v, &its)
				return res, name, its
			}
		}
		return res, "", nil
	}
	_, _, wantItems := items(want)
	mine := map[string]bool{}
	for _, it := range wantItems {
		mine[key(it)] = true
	}
	res, name, gotItems := items(got)
	if name == "" {
		return got
	}
	own := []map[string]json.RawMessage{}
	for _, it := range gotItems {
		if mine[key(it)] {
			own = append(own, it)
		}
	}
	res[name], _ = json.Marshal(own)
	var env map[string]json.RawMessage
	_ = json.Unmarshal(got, &env)
	env["result"], _ = json.Marshal(res)
	out, _ := json.Marshal(env)
	return out
}

// compatWithoutTools is a tools/list response without the tools named one
// of names, and those of names it had, sorted.
func compatWithoutTools(resp json.RawMessage, names []string) (json.RawMessage, []string) {
	var env map[string]json.RawMessage
	if json.Unmarshal(resp, &env) != nil || env["result"] == nil {
		return resp, nil
	}
	var res map[string]json.RawMessage
	_ = json.Unmarshal(env["result"], &res)
	var its []map[string]json.RawMessage
	_ = json.Unmarshal(res["tools"], &its)
	kept := []map[string]json.RawMessage{}
	var had []string
	for _, it := range its {
		var n string
		_ = json.Unmarshal(it["name"], &n)
		if slices.Contains(names, n) {
			had = append(had, n)
			continue
		}
		kept = append(kept, it)
	}
	slices.Sort(had)
	res["tools"], _ = json.Marshal(kept)
	env["result"], _ = json.Marshal(res)
	out, _ := json.Marshal(env)
	return out, had
}

// compatWithoutMember is a response whose result lacks member name.
func compatWithoutMember(resp json.RawMessage, name string) json.RawMessage {
	var env, res map[string]json.RawMessage
	if json.Unmarshal(resp, &env) != nil || json.Unmarshal(env["result"], &res) != nil {
		return resp
	}
	delete(res, name)
	env["result"], _ = json.Marshal(res)
	out, _ := json.Marshal(env)
	return out
}

// compatEmpty reports whether a list response has no items.
func compatEmpty(resp json.RawMessage) bool {
	var res map[string]json.RawMessage
	if json.Unmarshal(resultOf(resp), &res) != nil {
		return false
	}
	for _, l := range compatLists {
		var its []json.RawMessage
		if json.Unmarshal(res[l.items], &its) == nil && len(its) > 0 {
			return false
		}
	}
	return true
}

// compatRequired reports whether a modern response (before compatWithout)
// has every member the modern era requires of a result of method (an
// error needs none).
func compatRequired(resp json.RawMessage, method string) bool {
	r := resultOf(resp)
	if r == nil {
		return true
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(r, &m)
	for _, mem := range revision.Members {
		if mem.Era == revision.Modern && mem.Place == revision.InResult && mem.Required && mem.For(method) {
			if _, ok := m[mem.Name]; !ok {
				return false
			}
		}
	}
	return true
}

// compatWithout is a modern response without what differs by who answers
// it and how it caches: ttlMs, cacheScope, the serverInfo of _meta; for
// one of a legacy-only server, every member only the modern era has (the
// table's), after checking those it requires are there.
func compatWithout(resp json.RawMessage, method string, legacyOnly bool) json.RawMessage {
	var env map[string]json.RawMessage
	if json.Unmarshal(resp, &env) != nil || env["result"] == nil {
		return resp
	}
	r := env["result"]
	if legacyOnly {
		r = revision.ToLegacyResult(method, r)
	} else {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(r, &m)
		delete(m, "ttlMs")
		delete(m, "cacheScope")
		var meta map[string]json.RawMessage
		if json.Unmarshal(m["_meta"], &meta) == nil {
			delete(meta, revision.MetaServerInfo)
			if len(meta) == 0 {
				delete(m, "_meta")
			} else {
				m["_meta"], _ = json.Marshal(meta)
			}
		}
		r, _ = json.Marshal(m)
	}
	env["result"] = r
	out, _ := json.Marshal(env)
	return out
}

// compatDelta says how two responses differ: the members of their results
// (or errors) that do, each as directly and through mcpvisor.
func compatDelta(w, g json.RawMessage) string {
	var a, b map[string]json.RawMessage
	if json.Unmarshal(resultOf(w), &a) != nil || json.Unmarshal(resultOf(g), &b) != nil {
		return fmt.Sprintf("directly %s, through mcpvisor %s", clip(w), clip(g))
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if !jsonSame(a[k], b[k]) {
			parts = append(parts, fmt.Sprintf("%s directly %s, through mcpvisor %s", k, clip(a[k]), clip(b[k])))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			parts = append(parts, fmt.Sprintf("%s through mcpvisor only: %s", k, clip(b[k])))
		}
	}
	return strings.Join(parts, "; ")
}

// jsonSame reports whether a and b are the same JSON value.
func jsonSame(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	p, _ := json.Marshal(x)
	q, _ := json.Marshal(y)
	return bytes.Equal(p, q)
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

const publicURL = "https://mcp.example.test"

// lastTeamConfig is the config file teamServeWith wrote last.
var lastTeamConfig atomic.Pointer[string]

// teamConfigFile is the config file of the serve teamServeWith started
// last in this test.
func teamConfigFile(t *testing.T) string { return *lastTeamConfig.Load() }

// teamServe runs serve with auth against the fake issuer iss, a static
// token, and serverScopes for x; it returns serve's address.
func teamServe(t testing.TB, iss *authntest.Issuer) string {
	t.Helper()
	return teamServeWith(t, iss, "")
}

// teamServeWith is teamServe with more top-level members (after auth).
func teamServeWith(t testing.TB, iss *authntest.Issuer, extra string) string {
	t.Helper()
	fixture := testserver.Build(t)
	cfg := filepath.Join(t.TempDir(), "config.json")
	lastTeamConfig.Store(&cfg)
	doc := `{"auth": {"issuer": "` + iss.URL + `", "publicUrl": "` + publicURL + `/", "scopes": ["mcp"], "serverScopes": {"x": ["x:use"]}},` + extra + `
	  "mcpServers": {"x": {"command": "` + fixture + `"}}}`
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	o := ServeOptions{Options: options(t, cfg), Listen: "127.0.0.1:0", Socket: "none", NoWatch: true, Token: "static-admin-token"}
	o.Stderr = &syncWriter{}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, o) }()
	addr := waitServing(t, o.Stderr.(*syncWriter), done)
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not end")
		}
	})
	return addr
}

// userToken is a token of sub for /mcp with the scopes its calls of x
// need (mcp, and x's own).
func userToken(t testing.TB, iss *authntest.Issuer, sub string) string {
	c := iss.Claims(sub, publicURL+"/mcp")
	c["scope"] = "mcp x:use"
	return iss.Mint(t, c, authntest.MintOptions{})
}

type reply struct {
	status int
	www    string
	body   string
	sid    string // Mcp-Session-Id
}

func send(t *testing.T, method, url, body string, hdr map[string][]string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b), resp.Header.Get("Mcp-Session-Id")}
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`

func bearer(tok string) map[string][]string {
	return map[string][]string{"Authorization": {"Bearer " + tok}}
}

// mcpvisor as an OAuth resource server: resource metadata from the
// public URL, challenges that point at it, tokens bound to their
// endpoint, every scope an endpoint needs in one 403, RFC 6750's rules
// on where a token may be, and the static token an admin credential
// only.
func TestResourceServer(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	addr := teamServe(t, iss)
	base := "http://" + addr

	// Resource metadata: the public URL's, whatever the Host.
	for path, want := range map[string]string{"/mcp": publicURL + "/mcp", "/servers/x/mcp": publicURL + "/servers/x/mcp", "": publicURL} {
		r := send(t, "GET", base+"/.well-known/oauth-protected-resource"+path, "", map[string][]string{"Host": {"localhost:1"}})
		var m struct {
			Resource string   `json:"resource"`
			AS       []string `json:"authorization_servers"`
		}
		if r.status != 200 || json.Unmarshal([]byte(r.body), &m) != nil || m.Resource != want || len(m.AS) != 1 || m.AS[0] != iss.URL {
			t.Errorf("metadata of %q: %d %s", path, r.status, r.body)
		}
	}
	if r := send(t, "GET", base+"/.well-known/oauth-protected-resource/servers/nope/mcp", "", nil); r.status != 404 {
		t.Errorf("metadata of an unknown server: %d", r.status)
	}

	prm := `resource_metadata="` + publicURL + `/.well-known/oauth-protected-resource/mcp"`
	mcpTok := userToken(t, iss, "alice")
	cases := []struct {
		name, url string
		hdr       map[string][]string
		status    int
		www       []string
	}{
		{"no token", "/mcp", nil, 401, []string{prm, `scope="mcp"`}},
		{"a good token", "/mcp", bearer(mcpTok), 200, nil},
		{"another endpoint's token", "/mcp", bearer(iss.Mint(t, iss.Claims("alice", publicURL+"/servers/x/mcp"), authntest.MintOptions{})), 401, []string{`error="invalid_token"`}},
		{"a token lacking the scope", "/mcp", bearer(iss.Mint(t, func() map[string]any {
			c := iss.Claims("alice", publicURL+"/mcp")
			c["scope"] = "other"
			return c
		}(), authntest.MintOptions{})), 403, []string{`error="insufficient_scope"`, `scope="mcp"`, prm}},
		{"every scope of a server's endpoint", "/servers/x/mcp", bearer(iss.Mint(t, iss.Claims("alice", publicURL+"/servers/x/mcp"), authntest.MintOptions{})), 403,
			[]string{`error="insufficient_scope"`, `scope="mcp x:use"`, `resource_metadata="` + publicURL + `/.well-known/oauth-protected-resource/servers/x/mcp"`}},
		{"two Authorization headers", "/mcp", map[string][]string{"Authorization": {"Bearer " + mcpTok, "Bearer " + mcpTok}}, 400, []string{`error="invalid_request"`}},
		{"a header and a query token", "/mcp?access_token=" + mcpTok, bearer(mcpTok), 400, []string{`error="invalid_request"`}},
		{"a token only in the URL", "/mcp?access_token=" + mcpTok, nil, 401, []string{prm}},
		{"the static token on an MCP endpoint", "/mcp", bearer("static-admin-token"), 401, []string{`error="invalid_token"`}},
		{"a wrong issuer", "/mcp", bearer(iss.Mint(t, func() map[string]any {
			c := iss.Claims("alice", publicURL+"/mcp")
			c["iss"] = "https://evil.example"
			return c
		}(), authntest.MintOptions{})), 401, []string{`error="invalid_token"`}},
	}
	for _, c := range cases {
		r := send(t, "POST", base+c.url, initBody, c.hdr)
		if r.status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.status, r.body, c.status)
			continue
		}
		for _, w := range c.www {
			if !strings.Contains(r.www, w) {
				t.Errorf("%s: WWW-Authenticate %q lacks %s", c.name, r.www, w)
			}
		}
	}

	// The admin routes: the admin scope for the base URL's audience, or
	// the static token.
	adminClaims := iss.Claims("root", publicURL)
	adminClaims["scope"] = "mcpvisor:admin"
	for name, c := range map[string]struct {
		hdr    map[string][]string
		status int
	}{
		"no token":           {nil, 401},
		"an MCP token":       {bearer(mcpTok), 401},
		"the admin scope":    {bearer(iss.Mint(t, adminClaims, authntest.MintOptions{})), 200},
		"the static token":   {bearer("static-admin-token"), 200},
		"another static one": {bearer("static-admin-token2"), 401},
	} {
		if r := send(t, "GET", base+"/api/servers", "", c.hdr); r.status != c.status {
			t.Errorf("admin API with %s: %d %s, want %d", name, r.status, r.body, c.status)
		}
	}
}

// postCall posts a legacy-free (2026-07-28) tools/call of x's tool with
// tok, and returns the reply.
func postCall(t *testing.T, base, tok, tool, args string) (reply, http.Header) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args +
		`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(body))
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b), resp.Header.Get("Mcp-Session-Id")}, resp.Header
}

// The policy, the rate limits and the audit through serve: a denied call
// says only "not permitted" to its client and everything to the audit; a
// call over the limit gets 429 with Retry-After; the audit has one line
// for each call and refusal, read back through /api/audit.
func TestPolicyLimitsAndAuditThroughServe(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	addr := teamServeWith(t, iss, `
	  "policy": [{"name": "no-crash", "effect": "deny", "when": "tool == \"crash\""}],
	  "rateLimits": {"perTool": {"perSecond": 0.001, "burst": 2}},
	  "audit": {"file": "`+auditFile+`", "arguments": "full"},`)
	base := "http://" + addr
	alice := userToken(t, iss, "alice")
	bob := userToken(t, iss, "bob")

	for i := range 2 {
		if r, _ := postCall(t, base, alice, "x__echo", `{"text":"hi"}`); r.status != 200 || strings.Contains(r.body, `"error"`) {
			t.Fatalf("alice's call %d: %d %s", i, r.status, r.body)
		}
	}
	r, hdr := postCall(t, base, alice, "x__echo", `{"text":"hi"}`)
	if r.status != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || !strings.Contains(r.body, `"code":-32013`) {
		t.Errorf("alice over the limit: %d Retry-After %q %s", r.status, hdr.Get("Retry-After"), r.body)
	}
	if r, _ := postCall(t, base, bob, "x__echo", `{"text":"hi"}`); r.status != 200 || strings.Contains(r.body, `"error"`) {
		t.Errorf("bob is limited by alice's calls: %d %s", r.status, r.body)
	}
	r, _ = postCall(t, base, bob, "x__crash", `{}`)
	if !strings.Contains(r.body, `"code":-32012`) || !strings.Contains(r.body, `"not permitted"`) || strings.Contains(r.body, "no-crash") {
		t.Errorf("bob's denied call: %d %s", r.status, r.body)
	}

	adminClaims := iss.Claims("root", publicURL)
	adminClaims["scope"] = "mcpvisor:admin"
	admin := iss.Mint(t, adminClaims, authntest.MintOptions{})
	var lines []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := send(t, "GET", base+"/api/audit?limit=100", "", bearer(admin))
		lines = nil
		for _, l := range strings.Split(strings.TrimSpace(a.body), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil {
				lines = append(lines, m)
			}
		}
		if len(lines) >= 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := map[string]int{}
	for _, l := range lines {
		got[fmt.Sprint(l["identity"], " ", l["target"], " ", l["outcome"])]++
		if l["identity"] == "bob" && l["outcome"] == "denied" && !strings.Contains(fmt.Sprint(l["reason"]), "no-crash") {
			t.Errorf("the denial's line lacks its rule: %v", l)
		}
		if l["target"] == "echo" && fmt.Sprint(l["arguments"]) != "map[text:hi]" {
			t.Errorf("arguments: %v", l["arguments"])
		}
	}
	want := map[string]int{"alice echo ok": 2, "alice echo limited": 1, "bob echo ok": 1, "bob crash denied": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audit lines: %v, want %v", got, want)
	}
	if a := send(t, "GET", base+"/api/audit", "", bearer(alice)); a.status != 401 {
		t.Errorf("/api/audit with a non-admin token: %d", a.status)
	}
	m := send(t, "GET", base+"/metrics", "", bearer(admin))
	for _, want := range []string{"mcpvisor_policy_denied_total 1\n", `mcpvisor_audit_records_total{result="written"} 5` + "\n",
		`mcpvisor_audit_records_total{result="dropped"} 0` + "\n", `mcpvisor_ratelimit_limited_total{scope="tool"} 1` + "\n", "mcpvisor_audit_accepting 1\n"} {
		if !strings.Contains(m.body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// legacySession initializes a legacy session at version with tok and
// clientInfo name, and returns its id.
func legacySession(t *testing.T, base, tok, version, client string) string {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"` + client + `","version":"1"}}}`
	req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(body))
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
	send(t, "POST", base+"/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, map[string][]string{"Authorization": {"Bearer " + tok}, "Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {version}})
	return sid
}

// Ways around the policy through serve, each refused, none reaching the
// server: a JSON-RPC batch hiding a denied call; names differing from a
// denied tool's by case, a Unicode look-alike, a doubled prefix or
// spaces; a self-declared clientInfo naming the client a rule wants.
func TestPolicyBypassesThroughServe(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	addr := teamServeWith(t, iss, `
	  "policy": [{"name": "no-crash", "effect": "deny", "when": "tool == \"crash\""},
	             {"name": "trusted-log", "effect": "deny", "when": "tool == \"log\" && identity.client != \"trusted\""}],`)
	base := "http://" + addr
	tok := userToken(t, iss, "alice")
	pid := func() string {
		r, _ := postCall(t, base, tok, "x__pid", `{}`)
		if r.status != 200 || strings.Contains(r.body, `"error"`) {
			t.Fatalf("pid: %d %s", r.status, r.body)
		}
		return r.body[strings.Index(r.body, `"text"`):]
	}
	before := pid()

	for _, name := range []string{"X__crash", "x__CRASH", "x__crаsh", "x__x__crash", " x__crash", "x__crash ", "x__cr\\u0061sh"} {
		r, _ := postCall(t, base, tok, name, `{}`)
		if !strings.Contains(r.body, `"error"`) {
			t.Errorf("%q: %d %s", name, r.status, r.body)
		}
	}

	// A 2025-03-26 session's batch: each call is decided on its own.
	sid := legacySession(t, base, tok, "2025-03-26", "batcher")
	hdr := map[string][]string{"Authorization": {"Bearer " + tok}, "Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-03-26"}}
	r := send(t, "POST", base+"/mcp", `[{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x__echo","arguments":{"text":"ok"}}},`+
		`{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"x__crash","arguments":{}}}]`, hdr)
	var replies []struct {
		ID    string              `json:"id"`
		Error *struct{ Code int } `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &replies); err != nil || len(replies) != 2 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	for _, rep := range replies {
		if denied := rep.Error != nil && rep.Error.Code == -32012; denied != (rep.ID == "b") {
			t.Errorf("batch element %s: %+v", rep.ID, rep.Error)
		}
	}

	// clientInfo names the trusted client; the token's client_id does not.
	sid = legacySession(t, base, tok, "2025-11-25", "trusted")
	hdr = map[string][]string{"Authorization": {"Bearer " + tok}, "Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-11-25"}}
	r = send(t, "POST", base+"/mcp", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x__log","arguments":{"text":"x"}}}`, hdr)
	if !strings.Contains(r.body, `"code":-32012`) {
		t.Errorf("a spoofed clientInfo: %d %s", r.status, r.body)
	}

	if after := pid(); after != before {
		t.Errorf("the server was restarted (a crash call reached it): pid %s, then %s", before, after)
	}
}

// Under a flood of calls the audit may drop lines, never lose count:
// written + dropped = every call and denial, as /metrics reports them.
func TestAuditOverloadCountsEveryCall(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	addr := teamServeWith(t, iss, `
	  "policy": [{"name": "no-crash", "effect": "deny", "when": "tool == \"crash\""}],
	  "audit": {"file": "`+filepath.Join(t.TempDir(), "audit.jsonl")+`", "queue": 1},`)
	base := "http://" + addr
	tok := userToken(t, iss, "alice")
	const n = 160
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tool := "x__echo"
			if i%4 == 0 {
				tool = "x__crash" // denied
			}
			postCall(t, base, tok, tool, `{"text":"x"}`)
		})
	}
	wg.Wait()
	adminClaims := iss.Claims("root", publicURL)
	adminClaims["scope"] = "mcpvisor:admin"
	admin := iss.Mint(t, adminClaims, authntest.MintOptions{})
	var written, dropped int
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := send(t, "GET", base+"/metrics", "", bearer(admin)).body
		written, dropped = metric(m, `mcpvisor_audit_records_total{result="written"}`), metric(m, `mcpvisor_audit_records_total{result="dropped"}`)
		if written+dropped == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if written+dropped != n {
		t.Errorf("written %d + dropped %d, want %d calls and denials", written, dropped, n)
	}
	t.Logf("written %d, dropped %d", written, dropped)
}

// metric is the value of the sample named name in a /metrics body, or -1.
func metric(body, name string) int {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	return -1
}

// The policy is reloaded live with the config: a rule added denies at
// once, with no restart; a rule that does not compile keeps the policy
// in force, and the reload says why, naming the rule's path.
func TestPolicyReloadsLive(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	addr := teamServeWith(t, iss, ``)
	base := "http://" + addr
	tok := userToken(t, iss, "alice")
	adminClaims := iss.Claims("root", publicURL)
	adminClaims["scope"] = "mcpvisor:admin"
	admin := bearer(iss.Mint(t, adminClaims, authntest.MintOptions{}))
	if r, _ := postCall(t, base, tok, "x__echo", `{"text":"a"}`); strings.Contains(r.body, `"error"`) {
		t.Fatalf("before: %s", r.body)
	}
	cfgFile := teamConfigFile(t)
	rewrite := func(policy string) reply {
		data, _ := os.ReadFile(cfgFile)
		doc := strings.Replace(string(data), `"mcpServers"`, `"policy": `+policy+`, "mcpServers"`, 1)
		if err := os.WriteFile(cfgFile, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		r := send(t, "POST", base+"/api/reload", "", admin)
		_ = os.WriteFile(cfgFile, data, 0o600)
		return r
	}
	if r := rewrite(`[{"effect": "deny", "when": "tool == \"echo\""}]`); r.status != 200 {
		t.Fatalf("reload: %d %s", r.status, r.body)
	}
	if r, _ := postCall(t, base, tok, "x__echo", `{"text":"a"}`); !strings.Contains(r.body, `"code":-32012`) {
		t.Errorf("after the reload: %s", r.body)
	}
	r := rewrite(`[{"effect": "deny", "when": "tool == 1"}]`)
	if r.status == 200 || !strings.Contains(r.body, "policy[0].when") {
		t.Errorf("a reload with a bad rule: %d %s", r.status, r.body)
	}
	if r, _ := postCall(t, base, tok, "x__echo", `{"text":"a"}`); !strings.Contains(r.body, `"code":-32012`) {
		t.Errorf("the policy in force changed by a failed reload: %s", r.body)
	}
}

// A server's scopes are needed through /mcp too: a token without them
// does not see the server's tools listed, and a call of one gets 403
// with an insufficient_scope challenge naming every scope it needs (a
// client's step-up); with them, the call is served.
func TestServerScopesThroughTheAggregate(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	addr := teamServe(t, iss)
	base := "http://" + addr
	plain := iss.Mint(t, iss.Claims("alice", publicURL+"/mcp"), authntest.MintOptions{})
	r, _ := postCall(t, base, plain, "x__echo", `{"text":"a"}`)
	if r.status != http.StatusForbidden || !strings.Contains(r.www, `error="insufficient_scope"`) || !strings.Contains(r.www, `scope="mcp x:use"`) ||
		!strings.Contains(r.www, `resource_metadata="`+publicURL+`/.well-known/oauth-protected-resource/mcp"`) || !strings.Contains(r.body, `"code":-32014`) {
		t.Errorf("a call without the server's scope: %d %q %s", r.status, r.www, r.body)
	}
	list := func(tok string) string {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		hdr := bearer(tok)
		hdr["Mcp-Protocol-Version"] = []string{"2026-07-28"}
		hdr["Mcp-Method"] = []string{"tools/list"}
		return send(t, "POST", base+"/mcp", body, hdr).body
	}
	adminClaims := iss.Claims("root", publicURL)
	adminClaims["scope"] = "mcpvisor:admin"
	if m := send(t, "GET", base+"/metrics", "", bearer(iss.Mint(t, adminClaims, authntest.MintOptions{}))).body; !strings.Contains(m, "mcpvisor_scope_refused_total 1\n") {
		t.Errorf("/metrics does not count the refusal")
	}
	if l := list(plain); strings.Contains(l, "x__echo") {
		t.Errorf("the server's tools are listed to a token without its scope: %s", l)
	}
	c := iss.Claims("alice", publicURL+"/mcp")
	c["scope"] = "mcp x:use"
	full := iss.Mint(t, c, authntest.MintOptions{})
	if l := list(full); !strings.Contains(l, "x__echo") {
		t.Errorf("the server's tools are not listed with its scope: %s", l)
	}
	if r, _ := postCall(t, base, full, "x__echo", `{"text":"a"}`); r.status != 200 || strings.Contains(r.body, `"error"`) {
		t.Errorf("a call with the server's scope: %d %s", r.status, r.body)
	}
}

// mcpvisor stdio applies the audit and the rate limits as serve does:
// its client's calls are its local user's, each audited once.
func TestStdioAuditsAndLimitsItsLocalUser(t *testing.T) {
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	cfg := writeConfig(t, `"policy": [{"effect": "deny", "when": "tool == \"crash\""}], "audit": {"file": "`+auditFile+`", "arguments": "omit"},
	  "rateLimits": {"perTool": {"perSecond": 0.001, "burst": 1}},`)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	o := StdioOptions{Options: options(t, cfg), Stdin: inR, Stdout: outW}
	done := make(chan error, 1)
	go func() { done <- Stdio(t.Context(), o) }()
	out := bufio.NewReader(outR)
	ask := func(line string) string {
		t.Helper()
		go func() { _, _ = io.WriteString(inW, line+"\n") }()
		for {
			l, err := out.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the answer to %s: %v", line, err)
			}
			if strings.Contains(l, `"id":`) {
				return l
			}
		}
	}
	ask(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if l := ask(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"a"}}}`); strings.Contains(l, `"error"`) {
		t.Errorf("the first call: %s", l)
	}
	if l := ask(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"a"}}}`); !strings.Contains(l, `"code":-32013`) {
		t.Errorf("the second call, over the limit: %s", l)
	}
	if l := ask(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x__crash","arguments":{}}}`); !strings.Contains(l, `"code":-32012`) {
		t.Errorf("a denied call: %s", l)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	outW.Close()
	data, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["kind"] != "local" || m["issuer"] != "local" || m["identity"] == "" {
			t.Errorf("audit line %s", l)
		}
		outcomes = append(outcomes, fmt.Sprint(m["target"], " ", m["outcome"]))
	}
	if got := strings.Join(outcomes, ", "); got != "echo ok, echo limited, crash denied" {
		t.Errorf("audit: %s", got)
	}
}

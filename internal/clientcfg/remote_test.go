package clientcfg

import (
	"strings"
	"testing"
)

// TestMCPRemote reads mcp-remote command lines: what maps becomes a
// remote server, and anything mcpvisor cannot honour keeps the entry a
// local server, saying why.
func TestMCPRemote(t *testing.T) {
	for _, tc := range []struct {
		name, entry string
		// want is the entry as mcpvisor's config gets it; why, when
		// set, is in the note of an entry that stays local.
		want, why string
	}{
		{"plain", `{"command": "npx", "args": ["mcp-remote", "https://h.example/mcp"]}`,
			`{"url": "https://h.example/mcp"}`, ""},
		{"yes and version", `{"command": "npx", "args": ["--yes", "mcp-remote@0.1.29", "https://h.example/sse"]}`,
			`{"url": "https://h.example/sse", "type": "sse"}`, ""},
		{"sse path with query", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/sse/?x=1"]}`,
			`{"url": "https://h.example/sse/?x=1", "type": "sse"}`, ""},
		{"transport overrides the path", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/sse", "--transport", "http-only"]}`,
			`{"url": "https://h.example/sse"}`, ""},
		{"sse-only", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--transport", "sse-only"]}`,
			`{"url": "https://h.example/mcp", "type": "sse"}`, ""},
		{"header from env literal", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--header", "Authorization:${AUTH}"], "env": {"AUTH": "Bearer abc"}}`,
			`{"url": "https://h.example/mcp", "headers": {"Authorization": "Bearer abc"}}`, ""},
		{"header from env reference", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--header", "Authorization: Bearer ${AUTH}"], "env": {"AUTH": "${MY_TOKEN}"}}`,
			`{"url": "https://h.example/mcp", "headers": {"Authorization": "Bearer ${MY_TOKEN}"}}`, ""},
		{"header from the client's environment", `{"command": "npx", "args": ["mcp-remote", "https://h.example/mcp", "--header=X-Key: ${KEY:-none} $5"]}`,
			`{"url": "https://h.example/mcp", "headers": {"X-Key": "${KEY:-none} $$5"}}`, ""},
		{"static client info", `{"command": "npx", "args": ["mcp-remote", "https://h.example/mcp", "--static-oauth-client-info", "{\"client_id\":\"id\",\"client_secret\":\"sec\"}"]}`,
			`{"url": "https://h.example/mcp", "oauth": {"clientId": "id", "clientSecret": "sec"}}`, ""},
		{"metadata scope and ignored tools", `{"command": "npx", "args": ["mcp-remote", "https://h.example/mcp", "--static-oauth-client-metadata", "{\"scope\":\"a b\"}", "--ignore-tool", "del*[x]", "--debug", "--allow-http", "--silent", "--auth-timeout", "60"]}`,
			`{"url": "https://h.example/mcp", "oauth": {"scopes": ["a", "b"]}, "tools": {"deny": ["del*\\[x\\]"]}}`, ""},
		{"callback port", `{"command": "npx", "args": ["mcp-remote", "https://h.example/mcp", "3334", "--host", "127.0.0.1"]}`,
			`{"url": "https://h.example/mcp"}`, ""},

		{"no url", `{"command": "npx", "args": ["-y", "mcp-remote"]}`, "", "no server URL"},
		{"only flags", `{"command": "npx", "args": ["-y", "mcp-remote", "--transport", "http-only"]}`, "", "no server URL"},
		{"not http", `{"command": "npx", "args": ["-y", "mcp-remote", "ws://h.example/"]}`, "", `"ws://h.example/" is not http(s)`},
		{"a reference for the url", `{"command": "npx", "args": ["-y", "mcp-remote", "${BASE}/mcp"]}`, "", "is not http(s)"},
		{"unknown flag", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--enable-proxy"]}`, "", "--enable-proxy is a flag mcpvisor does not know"},
		{"unknown short flag", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "-v"]}`, "", "-v is a flag"},
		{"header without colon", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--header", "Bearer sk-0123456789abcdef0123"]}`, "", `a --header is not "Name: value"`},
		{"header without a value", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--header"]}`, "", "--header has no value"},
		{"bad transport", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--transport", "websocket"]}`, "", `--transport "websocket" is not one of`},
		{"resource", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--resource", "https://r/"]}`, "", "no resource override"},
		{"client info file", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--static-oauth-client-info", "@/x.json"]}`, "", "reads a file"},
		{"client info not JSON", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--static-oauth-client-info", "{x"]}`, "", "not a JSON object"},
		{"client info with a port", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "9000", "--static-oauth-client-info", "{\"client_id\":\"id\"}"]}`, "", "fixed callback port"},
		{"metadata beyond scope", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--static-oauth-client-metadata", "{\"client_name\":\"x\"}"]}`, "", `"client_name" has no counterpart`},
		{"third positional", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "3334", "extra"]}`, "", `"extra" is neither a flag`},
		{"env mcp-remote itself reads", `{"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp"], "env": {"MCP_REMOTE_CONFIG_DIR": "/x"}}`, "", "env MCP_REMOTE_CONFIG_DIR changes what mcp-remote does"},
		{"launcher not understood", `{"command": "npx", "args": ["--weird", "mcp-remote", "https://h.example/mcp"]}`, "", "not understood"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Read([]byte(`{"mcpServers": {"s": `+tc.entry+`}}`), FormatMCPServers)
			if err != nil {
				t.Fatal(err)
			}
			f.TakeOverMCPRemote(testLaunchers)
			s := f.Servers[0]
			notes := ""
			for _, n := range s.Notes {
				notes += n.String() + "\n"
			}
			if tc.why != "" {
				if s.Remote() || !strings.Contains(notes, "stays a local server") && !strings.Contains(notes, "not taken over") || !strings.Contains(notes, tc.why) {
					t.Errorf("remote %v, notes:\n%swant it local, saying %q", s.Remote(), notes, tc.why)
				}
				return
			}
			if got := mustJSON(s.Entry()); got != tc.want {
				t.Errorf("entry %s, want %s (notes:\n%s)", got, tc.want, notes)
			}
			if !strings.Contains(notes, "taken over as a remote server (saves one Node process)") {
				t.Errorf("notes:\n%s", notes)
			}
		})
	}
}

// TestMCPRemoteIsTheSameServer: an entry taken over from mcp-remote is
// the same server as the remote one and as the launch as written (an
// earlier import of it), and the header secret of mcp-remote's env is
// not left in a note.
func TestMCPRemoteIsTheSameServer(t *testing.T) {
	data := []byte(`{"mcpServers": {"s": {"command": "npx", "args": ["-y", "mcp-remote", "https://h.example/mcp", "--header", "Authorization:${A}"], "env": {"A": "Bearer sk-secret-value-0123456789"}}}}`)
	f, _ := Read(data, FormatMCPServers)
	written, _ := Read(data, FormatMCPServers) // an earlier import: as written
	f.TakeOverMCPRemote(testLaunchers)
	s := f.Servers[0]
	remote := &Server{Name: "x", URL: "https://h.example/mcp", Transport: TransportHTTP, Headers: []KV{{"Authorization", "Bearer sk-secret-value-0123456789"}}}
	if !SameLaunch(remote, s) || !SameLaunch(s, remote) || !SameLaunch(written.Servers[0], s) || !SameLaunch(s, written.Servers[0]) {
		t.Error("not the same server")
	}
	if SameLaunch(&Server{URL: "https://h.example/other", Transport: TransportHTTP}, s) {
		t.Error("another url is the same server")
	}
	for _, n := range s.Notes {
		if strings.Contains(n.String(), "sk-secret") {
			t.Errorf("a note shows the secret: %s", n)
		}
	}
	if s.Login {
		t.Error("an entry with an Authorization header signs in")
	}
}

// TestRemoteTakenOverByDefault: install-client takes remote entries
// over unless told to leave them (KeepRemote), and names the servers it
// now signs in to by their name in mcpvisor's config.
func TestRemoteTakenOverByDefault(t *testing.T) {
	data := []byte(`{"mcpServers": {"r": {"type": "http", "url": "https://h.example/mcp", "oauth": {"clientId": "c", "callbackPort": 1}}, "l": {"command": "x"}}}`)
	c := Lookup("claude-code")
	f, err := c.ReadIn(data, FormatMCPServers, "")
	if err != nil {
		t.Fatal(err)
	}
	known := []*Server{{Name: "l", Command: "x", Transport: TransportStdio}, {Name: "linear", URL: "https://h.example/mcp", Transport: TransportHTTP}}
	plan, err := c.PlanInstall(data, FormatMCPServers, InstallOptions{Exe: "/bin/mcpvisor", Config: "/c.json", Known: known})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(plan.Taken, ",") != "r,l" {
		t.Errorf("taken %v, want r and l", plan.Taken)
	}
	var notes []string
	for _, n := range plan.Notes {
		notes = append(notes, n.String())
	}
	if !strings.Contains(strings.Join(notes, "\n"), "`mcpvisor login linear`") {
		t.Errorf("notes %q: want the login of linear", notes)
	}
	if f.Servers[0].OAuth == nil || f.Servers[0].OAuth.ClientID != "c" {
		t.Errorf("oauth %+v", f.Servers[0].OAuth)
	}
	plan, err = c.PlanInstall(data, FormatMCPServers, InstallOptions{Exe: "/bin/mcpvisor", Config: "/c.json", Known: known, KeepRemote: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(plan.Taken, ",") != "l" || len(plan.Kept) != 1 || !strings.Contains(plan.Kept[0].Msg, "--remote=false") {
		t.Errorf("kept remote: taken %v, kept %v", plan.Taken, plan.Kept)
	}
}

// TestClientSignIn maps the clients' sign-in settings: what has a
// meaning in mcpvisor's config is kept, the rest is named.
func TestClientSignIn(t *testing.T) {
	f, err := Lookup("codex").Read([]byte(`[mcp_servers.a]
url = "https://a.example/mcp"
bearer_token_env_var = "A_TOKEN"
http_headers = { "X-Other" = "1" }
env_http_headers = { "X-Env" = "A_ENV" }
scopes = ["s1"]
oauth_resource = "https://a.example/"

[mcp_servers.o]
url = "https://o.example/mcp"
scopes = ["s2"]

[mcp_servers.bad]
url = "https://b.example/mcp"
bearer_token_env_var = "not a name"

[mcp_servers.local]
command = "x"
scopes = ["s"]
`), FormatCodex)
	if err != nil {
		t.Fatal(err)
	}
	a := f.Server("a")
	if got := mustJSON(a.Entry()); got != `{"url": "https://a.example/mcp", "headers": {"Authorization": "Bearer ${A_TOKEN}", "X-Env": "${A_ENV}", "X-Other": "1"}, "oauth": {"scopes": ["s1"]}}` {
		t.Errorf("a: %s", got)
	}
	// its Authorization header is sent: no sign-in
	if a.Login || len(a.Notes) != 2 || !strings.Contains(a.Notes[0].Msg, "no resource override") || !strings.Contains(a.Notes[1].Msg, "does not sign in") || a.LeftToClient() != "" {
		t.Errorf("a: login %v, notes %v, left %q", a.Login, a.Notes, a.LeftToClient())
	}
	if o := f.Server("o"); !o.Login || mustJSON(o.Entry()) != `{"url": "https://o.example/mcp", "oauth": {"scopes": ["s2"]}}` {
		t.Errorf("o: login %v, %s", o.Login, mustJSON(o.Entry()))
	}
	if b := f.Server("bad"); !strings.Contains(b.Blocked, "bearer_token_env_var: must be the name of an environment variable") {
		t.Errorf("bad: %q", b.Blocked)
	}
	if l := f.Server("local"); !strings.Contains(l.LeftToClient(), "a sign-in for a server that has no url") {
		t.Errorf("local: %q", l.LeftToClient())
	}

	g, err := Lookup("claude-code").ReadIn([]byte(`{"mcpServers": {"n": {"type": "http", "url": "https://n.example/mcp", "oauth": {"clientId": "id", "callbackPort": 8080, "futureKey": 1}}}}`), FormatMCPServers, "")
	if err != nil {
		t.Fatal(err)
	}
	if n := g.Servers[0]; !strings.Contains(n.LeftToClient(), "oauth.futureKey") || n.OAuth.ClientID != "id" {
		t.Errorf("an unknown oauth key: left %q, oauth %+v", n.LeftToClient(), n.OAuth)
	}
}

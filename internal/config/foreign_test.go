package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestClientFormats loads the files of clients as configs: their servers
// are served, and what mcpvisor cannot take is a warning naming the field.
func TestClientFormats(t *testing.T) {
	lookup := func(k string) (string, bool) { return map[string]string{"TOKEN": "t"}[k], k == "TOKEN" }
	for _, tc := range []struct {
		name, file, data string
		servers          []string // name kind state
		warnings         []string
	}{
		{"vscode mcp.json", "mcp.json", `// servers
{
  "inputs": [{"type": "promptString", "id": "k"}],
  "servers": {
    "a": {"type": "stdio", "command": "npx", "args": ["-y", "@scope/pkg@^1.2"], "env": {"N": 1, "T": "${env:TOKEN}"},},
    "s": {"command": "npx", "envFile": "x", "sandboxEnabled": true},
    "b": {"command": "npx", "env": {"K": "${input:k}"}},
    "c": {"type": "sse", "url": "https://x.example/sse"},
  },
}`,
			[]string{"a stdio enabled npx -y @scope/pkg@^1.2", "c http (sse) enabled https://x.example/sse"},
			[]string{"servers.s: not served (the client's to run): servers.s.envFile: the server gets the variables of an env file", "servers.b: not served: servers.b.env.K: uses ${input:k}"}},
		{"zed settings.json", "settings.json", `{
  "theme": "x", // the rest is Zed's
  "context_servers": {
    "old": {"command": {"path": "node", "args": ["s.js"], "env": {}}, "settings": {}},
    "mid": {"source": "custom", "command": "uvx", "args": ["srv"], "enabled": false},
    "ext": {"source": "extension", "settings": {"k": 1}},
  },
}`,
			[]string{"mid stdio disabled uvx srv", "old stdio enabled node s.js"},
			[]string{"context_servers.ext.settings: a Zed extension's settings", "context_servers.ext: not served: a Zed extension's server"}},
		{"codex config.toml", "config.toml", `model = "m"
[mcp_servers.docs]
command = "npx"
args = ["-y", "pkg"]
env_vars = ["HOME"]
[mcp_servers.git]
command = "uvx"
args = ["git"]
disabled_tools = ["reset"]
tool_timeout_sec = 90
[mcp_servers.web]
url = "https://x.example/mcp"
http_headers = { "X-Token" = "$1" }
`,
			[]string{"git stdio enabled uvx git", "web http enabled https://x.example/mcp"},
			[]string{"mcp_servers.docs: not served (the client's to run): mcp_servers.docs.env_vars: variables passed on from Codex's environment"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.data), tc.file, LoadOptions{LookupEnv: lookup})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range cfg.Servers {
				state := "enabled"
				if s.Disabled {
					state = "disabled"
				}
				kind := s.Kind
				if s.Transport == TransportSSE {
					kind += " (sse)"
				}
				got = append(got, strings.Join([]string{s.Name, kind, state, s.Redacted()}, " "))
			}
			if strings.Join(got, "\n") != strings.Join(tc.servers, "\n") {
				t.Errorf("servers:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.servers, "\n"))
			}
			for _, w := range tc.warnings {
				if !strings.Contains(strings.Join(cfg.Warnings, "\n"), tc.file+": "+w) {
					t.Errorf("no warning %q in\n%s", w, strings.Join(cfg.Warnings, "\n"))
				}
			}
			if s := cfg.Server("a"); s != nil && (resolveAll(t, []string{s.Env["T"]}, envOf(map[string]string{"TOKEN": "t"}))[0] != "t" || s.Env["N"] != "1") {
				t.Errorf("a's env = %v", s.Env)
			}
			if s := cfg.Server("git"); s != nil && (s.Tools.Allowed("reset") || !s.Tools.Allowed("status") || s.RequestTimeout != 90*time.Second) {
				t.Errorf("git's tools %+v, requestTimeout %v: want reset denied, 90s", s.Tools, s.RequestTimeout)
			}
			if s := cfg.Server("web"); s != nil && resolveAll(t, []string{s.Headers["X-Token"]}, envOf(nil))[0] != "$1" {
				t.Errorf("web's headers = %v ($ is literal in Codex)", s.Headers)
			}
		})
	}
}

// TestClientFormatErrors: errors in a client's file name the client's
// field, and a syntax error its line and column.
func TestClientFormatErrors(t *testing.T) {
	for _, tc := range []struct{ file, data, want string }{
		{"mcp.json", `{"servers": {"a": {"command": 5}}}`, "mcp.json: servers.a.command: must be a string, not a number"},
		{"s.json", `{"context_servers": {"a": {"command": {"path": ""}}}}`, "s.json: context_servers.a.command.path: is empty"},
		{"c.toml", "[mcp_servers.a]\ncommand = \"x\"\nargs = \"y\"\n", "c.toml: mcp_servers.a.args: must be an array of strings"},
		{"c.toml", "[mcp_servers.a]\ncommand = \n", "c.toml:2:"},
		{"mcp.json", "{\"servers\": {\"a\": {\"command\": \"x\",}}, // ok\n  \"x\": ]}", "mcp.json:2:8:"},
		{"w.toml", "[mcp_servers.w]\nurl = \"ftp://x\"\nhttp_headers = {}\n", "w.toml: mcp_servers.w.url: must be an http:// or https:// URL"},
	} {
		_, err := Parse([]byte(tc.data), tc.file, LoadOptions{})
		var cerr *Error
		if !errors.As(err, &cerr) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.data, err, tc.want)
		}
	}
}

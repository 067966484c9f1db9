package clients

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --remote is on by default; --remote=false leaves remote entries to
// the client.
func TestRemoteFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, true}, {[]string{"--remote"}, true}, {[]string{"--remote=false"}, false}} {
		io, _, _ := streams()
		var got *InstallOptions
		cmd := NewCmdInstall(io, func(_ context.Context, o *InstallOptions) error { got = o; return nil })
		cmd.SetArgs(append([]string{"cursor"}, tc.args...))
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if got.Remote != tc.want {
			t.Errorf("%q: Remote %v, want %v", tc.args, got.Remote, tc.want)
		}
	}
	io, _, _ := streams()
	var imp *ImportOptions
	cmd := NewCmdImport(io, func(_ context.Context, o *ImportOptions) error { imp = o; return nil })
	cmd.SetArgs([]string{"cursor", "--move-secrets"})
	if err := cmd.Execute(); err != nil || !imp.MoveSecrets {
		t.Errorf("--move-secrets: %v, %+v", err, imp)
	}
}

// install-client --import takes over remote entries, mcp-remote ones and
// those the client signed in to, saying which mcpvisor now signs in to;
// what it writes, to the client's file and to mcpvisor's config,
// carries references as written, never their values (the environment
// here has them); --remote=false leaves the remote entries.
func TestInstallTakesOverRemoteEntries(t *testing.T) {
	const tokenValue = "resolved-value-must-not-appear"
	t.Setenv("NOTION_TOKEN", tokenValue)
	t.Setenv("LINEAR_KEY", tokenValue)
	t.Setenv("HOME_DIR_X", tokenValue)
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, ".config"))
	client := filepath.Join(dir, ".claude.json") // where --import reads it
	orig := `{"mcpServers": {
  "notion": {"type": "http", "url": "https://mcp.notion.com/mcp", "headers": {"X-Trace": "${NOTION_TOKEN}"}, "oauth": {"clientId": "nc", "callbackPort": 9000}},
  "linear": {"command": "npx", "args": ["-y", "mcp-remote", "https://mcp.linear.app/sse", "--header", "X-Key: ${LINEAR_KEY}"]},
  "local": {"command": "srv", "env": {"DIR": "${HOME_DIR_X:-/tmp}"}}
}}
`
	if err := os.WriteFile(client, []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "mcpvisor.json")
	io, out, _ := streams()
	o := &InstallOptions{IO: io, Client: "claude-code", MCPVisorConfig: cfg, StateDir: filepath.Join(dir, "state"), Import: true, Remote: true,
		Executable: func() (string, error) { return "/bin/mcpvisor", nil }, Now: newInstallFixture(t).install(io).Now}

	dry := *o
	dry.DryRun, dry.Remote = true, false
	if err := RunInstall(context.Background(), &dry); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "mcpServers.notion: remote: left to the client (--remote=false)") ||
		!strings.Contains(out.String(), "mcpServers.linear: remote: left to the client") {
		t.Errorf("--remote=false:\n%s", out)
	}

	out.Reset()
	if err := RunInstall(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	written, _ := os.ReadFile(client)
	config, _ := os.ReadFile(cfg)
	for _, f := range [][]byte{written, config, out.Bytes()} {
		if strings.Contains(string(f), tokenValue) {
			t.Errorf("a reference was resolved:\n%s", f)
		}
	}
	for _, w := range []string{`"X-Trace": "${NOTION_TOKEN}"`, `"X-Key": "${LINEAR_KEY}"`, `"DIR": "${HOME_DIR_X:-/tmp}"`, `"clientId": "nc"`, `"url": "https://mcp.linear.app/sse"`} {
		if !strings.Contains(string(config), w) {
			t.Errorf("mcpvisor's config lacks %s:\n%s", w, config)
		}
	}
	if strings.Contains(string(written), "mcp.notion.com") || strings.Contains(string(written), "mcp-remote") || !strings.Contains(string(written), `"mcpvisor"`) {
		t.Errorf("the client's file:\n%s", written)
	}
	for _, w := range []string{"mcpServers.notion: mcpvisor signs in to it now, not the client: log in with `mcpvisor login notion`",
		"mcpServers.linear: mcpvisor signs in to it now, not the client: log in with `mcpvisor login linear`",
		"mcpServers.linear: taken over as a remote server (saves one Node process)",
		"mcpServers.notion.oauth.callbackPort: not carried over",
		"now launches notion, linear, local through mcpvisor"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("the output lacks %q:\n%s", w, out)
		}
	}
}

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/cli/diag"
	"github.com/mcpvisor/mcpvisor/internal/config"
)

// runValidate runs the validate command on a config file holding data.
func runValidate(t *testing.T, data string, extra ...string) (stdout, stderr string, err error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := diag.NewCmdValidate(cmdutil.IOStreams{})
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"--config", f}, extra...))
	err = cmd.Execute()
	return strings.ReplaceAll(out.String(), f, "mcp.json"), strings.ReplaceAll(errOut.String(), f, "mcp.json"), err
}

func TestValidateSummary(t *testing.T) {
	t.Setenv("VALIDATE_TEST_TOKEN", "ghp_0123456789abcdefghijklmnopqrstuvwxyz")
	stdout, stderr, err := runValidate(t, `{
		"listen": "127.0.0.1:9000",
		"mcpServers": {
			"files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"],
			          "env": {"NODE_OPTIONS": "--max-old-space-size=256"}},
			"github": {"command": "gh-mcp", "args": ["--token", "${VALIDATE_TEST_TOKEN}"], "disabled": true},
			"remote": {"url": "https://mcp.example.com/mcp?api_key=abc", "headers": {"Authorization": "Bearer ${VALIDATE_TEST_TOKEN}"}},
			"legacy": {"url": "https://old.example.com/sse", "type": "sse"}
		},
		"clientSetting": 1
	}`)
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, stderr)
	}
	want := `mcp.json: valid, 4 servers (1 disabled), listen 127.0.0.1:9000
  files   stdio       enabled   npx -y @modelcontextprotocol/server-filesystem /srv/docs
  github  stdio       disabled  gh-mcp --token ${VALIDATE_TEST_TOKEN}
  legacy  http (sse)  enabled   https://old.example.com/sse
  remote  http        enabled   https://mcp.example.com/mcp?api_key=[REDACTED]
`
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	if want := "warning: mcp.json: clientSetting: unknown field, ignored\n"; stderr != want {
		t.Errorf("stderr = %q, want %q", stderr, want)
	}
	for _, secret := range []string{"ghp_", "256", "abc"} {
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("output shows %q", secret)
		}
	}
}

func TestValidateStrict(t *testing.T) {
	_, _, err := runValidate(t, `{"mcpServers": {"a": {"command": "x"}}, "clientSetting": 1}`, "--strict")
	var cerr *config.Error
	if !errors.As(err, &cerr) || !strings.Contains(err.Error(), "mcp.json: clientSetting: unknown field") {
		t.Fatalf("strict: err = %v", err)
	}
}

func TestValidateInvalid(t *testing.T) {
	stdout, stderr, err := runValidate(t, `{
		"mcpServers": {
			"files": {"comand": "npx", "idleTimeout": "10 minutes"},
			"bad name": {"url": "https://h/mcp", "restart": {"policy": "sometimes"}}
		}
	}`)
	if err == nil {
		t.Fatal("validate accepted an invalid config")
	}
	if stdout != "" {
		t.Errorf("stdout on error: %q", stdout)
	}
	msg := err.Error()
	for _, want := range []string{
		`4 problems:`,
		`mcpServers.files.idleTimeout: "10 minutes" is not a duration (use e.g. "90s" or "10m", or a number of seconds)`,
		`mcpServers.files: missing "command" (to run a local server) or "url" (for a remote one)`,
		`mcpServers["bad name"]: "bad name" is not a valid server name`,
		`mcpServers["bad name"].restart.policy: "sometimes" is not a restart policy (valid: "on-failure", "never", "always")`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if want := "warning: mcp.json: mcpServers.files.comand: unknown field, ignored; did you mean \"command\"?\n"; stderr != want {
		t.Errorf("stderr = %q, want %q", stderr, want)
	}
}

func TestValidateNeedsConfig(t *testing.T) {
	cmd := diag.NewCmdValidate(cmdutil.IOStreams{})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "config") {
		t.Errorf("without --config: %v", err)
	}
	cmd = diag.NewCmdValidate(cmdutil.IOStreams{})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--config", filepath.Join(t.TempDir(), "none.json")})
	if err := cmd.Execute(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

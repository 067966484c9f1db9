package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Secrets as users paste them into client files, one set per client (so
// that import keeps every server).
const (
	secretGitHub    = "ghp_R4nd0mL00k1ngT0k3nV4lu3Xy9Zq8Wp7Vo6"
	secretGitHub2   = "ghp_An0th3rT0k3nF0rZ3dQw3rTyU1oPaSdFgH"
	secretStripe    = "sk-live-51HxQpL2eZvKYlo2CabcdEFGhij"
	secretSlack     = "xoxb-2048-4096-Qw3rTyU1oPaSdFgHjKlZx"
	secretAWSID     = "AKIAIOSFODNN7EXAMPLE"
	secretAWS       = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	secretJWT       = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtZSJ9.c2lnbmF0dXJlLXZhbHVl"
	secretPassword  = "hunter2-correct-horse"
	secretURLPass   = "s3cr3tP4ssw0rd"
	secretPlainEnv  = "plain-db-name" // not token-like: hidden by its place only
	secretCodexEnv  = "codex-only-value"
	secretZedHeader = "zed-header-value"
)

var clientSecrets = []string{secretGitHub, secretGitHub2, secretStripe, secretSlack, secretAWSID, secretAWS, secretJWT, secretPassword, secretURLPass, secretPlainEnv, secretCodexEnv, secretZedHeader}

// secretClients are client files as users write them, each with secrets
// in env, headers, args and URLs, and a ${VAR} reference.
var secretClients = map[string]string{
	"claude-desktop": `{
  "mcpServers": {
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "` + secretGitHub + `", "DB_NAME": "` + secretPlainEnv + `"}
    }
  }
}
`,
	"cursor": `{
  "mcpServers": {
    "stripe": {"command": "npx", "args": ["-y", "@stripe/mcp", "--tools=all", "--api-key", "` + secretStripe + `"], "env": {"GITHUB_TOKEN": "${env:GITHUB_TOKEN}"}},
    "slack": {"url": "https://mcp.slack.example/mcp?api_key=` + secretSlack + `", "headers": {"Authorization": "Bearer ` + secretJWT + `"}}
  }
}
`,
	"vscode": `// VS Code
{
	"servers": {
		"aws": {"type": "stdio", "command": "uvx", "args": ["awslabs.aws-api-mcp-server"],
			"env": {"AWS_ACCESS_KEY_ID": "` + secretAWSID + `", "AWS_SECRET_ACCESS_KEY": "` + secretAWS + `", "AWS_REGION": "eu-west-1"}},
	},
}
`,
	"zed": `{
  "context_servers": {
    "db": {"command": "db-mcp", "args": ["--password", "` + secretPassword + `", "--db", "postgres://app:` + secretURLPass + `@db.local/app"]},
    "remote": {"url": "https://mcp.example.com/mcp", "headers": {"X-Api-Key": "` + secretZedHeader + `"}}
  }
}
`,
	"codex": `model = "gpt-5"

[mcp_servers.gh]
command = "gh-mcp"
args = ["--token=` + secretGitHub2 + `"]

[mcp_servers.gh.env]
EXTRA = "` + secretCodexEnv + `"
`,
}

// TestClientCommandsShowNoSecret runs the real binary, in a home holding
// client files full of secrets, through every command that prints a diff
// of a client's file or of mcpvisor's config: import --dry-run and import,
// install-client --dry-run (with --import) and install-client,
// uninstall-client --dry-run, refused (an entry edited) and done. No
// secret reaches stdout or stderr; the diffs show [REDACTED] where they
// were and the ${VAR} references as written; the files written hold the
// real values (the imported config is the dry run's diff with the
// secrets in), and uninstall-client restores each file byte for byte.
func TestClientCommandsShowNoSecret(t *testing.T) {
	h := newClientHome(t)
	orig := map[string][]byte{}
	for client, data := range secretClients {
		path := h.target(client)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		orig[client] = []byte(data)
	}
	cfg := filepath.Join(h.dir, ".config", "mcpvisor", "config.json")
	noSecret := func(what, out string) {
		t.Helper()
		for _, s := range clientSecrets {
			if strings.Contains(out, s) {
				t.Errorf("%s shows %q:\n%s", what, s, out)
			}
		}
	}

	dry, ok := h.run("import", "--dry-run")
	if !ok || !strings.Contains(dry, "+++ "+cfg+" (imported)") {
		t.Fatalf("import --dry-run: ok=%v\n%s", ok, dry)
	}
	noSecret("import --dry-run", dry)
	for _, want := range []string{`"GITHUB_PERSONAL_ACCESS_TOKEN": "[REDACTED]"`, `"--api-key",`, `"GITHUB_TOKEN": "${GITHUB_TOKEN}"`, `"--token=[REDACTED]"`, `"postgres://app:[REDACTED]@db.local/app"`, `"EXTRA": "[REDACTED]"`} {
		if !strings.Contains(dry, want) {
			t.Errorf("import --dry-run: no %s in\n%s", want, dry)
		}
	}
	if _, err := os.Stat(cfg); err == nil {
		t.Fatal("import --dry-run wrote the config")
	}

	out, ok := h.run("import")
	if !ok {
		t.Fatalf("import: %s", out)
	}
	noSecret("import", out)
	written := string(mustRead(t, cfg))
	for _, s := range []string{secretGitHub, secretPlainEnv, secretStripe, secretAWSID, secretAWS, secretPassword, secretURLPass, secretGitHub2, secretCodexEnv} {
		if !strings.Contains(written, s) {
			t.Errorf("the config written lacks %q:\n%s", s, written)
		}
	}
	// What the dry run showed is what was written, secrets aside.
	var plus []string
	for _, l := range strings.Split(dry, "\n") {
		if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++ ") {
			plus = append(plus, l[1:])
		}
	}
	lines := strings.Split(strings.TrimSuffix(written, "\n"), "\n")
	if len(lines) != len(plus) {
		t.Fatalf("the dry run showed %d lines, import wrote %d", len(plus), len(lines))
	}
	for i, l := range lines {
		if plus[i] != l && !strings.Contains(plus[i], "[REDACTED]") {
			t.Errorf("line %d: shown %q, written %q", i+1, plus[i], l)
		}
	}

	for client := range secretClients {
		path := h.target(client)
		out, ok := h.run("install-client", client, "--import", "--dry-run")
		if !ok || !strings.Contains(out, "+++ "+path+" (installed)") {
			t.Fatalf("install-client %s --dry-run: ok=%v\n%s", client, ok, out)
		}
		noSecret("install-client "+client+" --dry-run", out)
		if !strings.Contains(out, "[REDACTED]") {
			t.Errorf("install-client %s --dry-run: no [REDACTED] in\n%s", client, out)
		}
		if out, ok = h.run("install-client", client); !ok {
			t.Fatalf("install-client %s: %s", client, out)
		}
		noSecret("install-client "+client, out)
		if out, ok = h.run("uninstall-client", client, "--dry-run"); !ok || !strings.Contains(out, "+++ "+path+" (restored)") {
			t.Fatalf("uninstall-client %s --dry-run: ok=%v\n%s", client, ok, out)
		}
		noSecret("uninstall-client "+client+" --dry-run", out)
	}

	// Cursor's file edited in the entry install-client wrote: the refusal
	// shows the change, and no secret of the remote entry it took over.
	path := h.target("cursor")
	installed := mustRead(t, path)
	edited := strings.Replace(string(installed), `"connect"`, `"connect", "--verbose"`, 1)
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, ok = h.run("uninstall-client", "cursor"); ok || !strings.Contains(out, `"--verbose"`) {
		t.Fatalf("uninstall-client of an edited entry: ok=%v\n%s", ok, out)
	}
	noSecret("uninstall-client (refused)", out)
	if err := os.WriteFile(path, installed, 0o600); err != nil {
		t.Fatal(err)
	}

	for client := range secretClients {
		if out, ok := h.run("uninstall-client", client); !ok {
			t.Fatalf("uninstall-client %s: %s", client, out)
		} else {
			noSecret("uninstall-client "+client, out)
		}
		if got := mustRead(t, h.target(client)); string(got) != string(orig[client]) {
			t.Errorf("%s: not restored byte for byte:\n%s", client, got)
		}
	}
}

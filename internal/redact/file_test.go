package redact

import (
	"bytes"
	"strings"
	"testing"
)

// Realistic secrets, each of a shape users paste into client files.
const (
	ghToken    = "ghp_R4nd0mL00k1ngT0k3nV4lu3Xy9Zq8Wp7Vo6"
	stripeKey  = "sk-live-51HxQpL2eZvKYlo2CabcdEFGhij"
	slackBot   = "xoxb-2048-4096-Qw3rTyU1oPaSdFgHjKlZx"
	awsKeyID   = "AKIAIOSFODNN7EXAMPLE"
	awsSecret  = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	bearer     = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtZSJ9.c2lnbmF0dXJlLXZhbHVl"
	dbPassword = "hunter2-correct-horse"
	urlPass    = "s3cr3tP4ss"
	shortEnv   = "plainvalue" // not token-like: hidden by its place only
)

var secrets = []string{ghToken, stripeKey, slackBot, awsKeyID, awsSecret, bearer, dbPassword, urlPass, shortEnv}

// TestFilesHidesSecrets: every client format with realistic secrets in
// env, headers, args (both flag forms), URLs (credentials, token query
// parameters), a secret-named field and a comment shows none of them,
// keeps ${VAR} references and what is not secret as written, and has as
// many lines as the file.
func TestFilesHidesSecrets(t *testing.T) {
	tests := []struct {
		name   string
		syntax Syntax
		file   string
		// want are lines (trimmed) the display must hold.
		want []string
	}{
		{"claude desktop / cursor mcpServers", JSON, `{
  "mcpServers": {
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server", "--api-key", "` + stripeKey + `", "--token=` + ghToken + `"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "` + ghToken + `", "AWS_ACCESS_KEY_ID": "` + awsKeyID + `", "AWS_SECRET_ACCESS_KEY": "` + awsSecret + `", "LOG_LEVEL": "` + shortEnv + `", "FROM_ENV": "${GH_TOKEN}"}
    },
    "slack": {"url": "https://bot:` + urlPass + `@mcp.slack.example/mcp?api_key=` + slackBot + `&team=T1", "headers": {"Authorization": "Bearer ` + bearer + `", "X-Ref": "Bearer ${SLACK_TOKEN}"}},
    "db": {"command": "db-mcp", "args": ["--password", "` + dbPassword + `", "--db", "postgres://app:` + urlPass + `@db.local/app"]}
  }
}
`, []string{
			`"args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server", "--api-key", "[REDACTED]", "--token=[REDACTED]"],`,
			`"env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "[REDACTED]", "AWS_ACCESS_KEY_ID": "[REDACTED]", "AWS_SECRET_ACCESS_KEY": "[REDACTED]", "LOG_LEVEL": "[REDACTED]", "FROM_ENV": "${GH_TOKEN}"}`,
			`"slack": {"url": "https://bot:[REDACTED]@mcp.slack.example/mcp?api_key=[REDACTED]&team=T1", "headers": {"Authorization": "[REDACTED]", "X-Ref": "Bearer ${SLACK_TOKEN}"}},`,
			`"db": {"command": "db-mcp", "args": ["--password", "[REDACTED]", "--db", "postgres://app:[REDACTED]@db.local/app"]}`,
		}},
		{"vscode mcp.json (JSONC)", JSON, `// my servers; old token ` + ghToken + `
{
	"inputs": [{"type": "promptString", "id": "api-key", "password": true}],
	"servers": {
		/* github: GITHUB_TOKEN=` + ghToken + ` */
		"github": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
			"env": {"GITHUB_TOKEN": "${env:GITHUB_TOKEN}", "PORT": 8080, "PIN": 424242, "STATIC": "` + ghToken + `"},},
		"remote": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${input:api-key}"}},
		// the everything server
		"everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]},
	},
}
`, []string{
			`// [REDACTED]`,
			`/* [REDACTED] */`,
			`"env": {"GITHUB_TOKEN": "${env:GITHUB_TOKEN}", "PORT": "[REDACTED]", "PIN": "[REDACTED]", "STATIC": "[REDACTED]"},},`,
			`"remote": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${input:api-key}"}},`,
			`// the everything server`,
		}},
		{"zed settings.json, nested command", JSON, `{
  "context_servers": {
    "nested": {"command": {"path": "node", "args": ["/opt/srv/index.js", "--token", "` + slackBot + `"], "env": {"A": "` + dbPassword + `"}}, "settings": {"apiKey": "` + stripeKey + `"}},
    "remote": {"url": "https://mcp.example.com/sse?token=` + bearer + `", "headers": {"X-Api-Key": "` + shortEnv + `"}}
  }
}
`, []string{
			`"nested": {"command": {"path": "node", "args": ["/opt/srv/index.js", "--token", "[REDACTED]"], "env": {"A": "[REDACTED]"}}, "settings": {"apiKey": "[REDACTED]"}},`,
			`"remote": {"url": "https://mcp.example.com/sse?token=[REDACTED]", "headers": {"X-Api-Key": "[REDACTED]"}}`,
		}},
		{"claude code ~/.claude.json", JSON, `{
  "primaryApiKey": "` + stripeKey + `",
  "mcpServers": {"sentry": {"type": "http", "url": "https://mcp.sentry.dev/mcp", "headers": {"Authorization": "Bearer ${SENTRY_TOKEN:-` + bearer + `}"}}},
  "projects": {"/home/me/token-service": {"mcpServers": {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "env": {"MEMORY_FILE_PATH": "${HOME}/memory.json"}}}}}
}
`, []string{
			`"primaryApiKey": "[REDACTED]",`,
			`"mcpServers": {"sentry": {"type": "http", "url": "https://mcp.sentry.dev/mcp", "headers": {"Authorization": "Bearer ${SENTRY_TOKEN:-[REDACTED]}"}}},`,
			// a path that names a secret is a key: shown, and so is
			// what is under it
			`"projects": {"/home/me/token-service": {"mcpServers": {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "env": {"MEMORY_FILE_PATH": "${HOME}/memory.json"}}}}}`,
		}},
		{"codex config.toml", TOML, `# Codex; token = ` + ghToken + `
model = "gpt-5"

[mcp_servers.aws]
command = "uvx"
args = [
  "awslabs.aws-api-mcp-server",  # the server
  "--access-key", "` + awsKeyID + `",
  '--secret=` + awsSecret + `',
]
env = { AWS_SECRET_ACCESS_KEY = "` + awsSecret + `", "AWS_REGION" = "` + shortEnv + `" } # keys
startup_timeout_sec = 20

[mcp_servers.aws.env]
SLACK = '''` + slackBot + `'''
REF = "${SLACK_TOKEN}"

[mcp_servers.remote]
url = "https://user:` + urlPass + `@mcp.example.com/mcp"
bearer_token = "` + bearer + `"
http_headers = { "X-Api-Key" = "` + dbPassword + `" }
env_http_headers = { "Authorization" = "AUTH_HEADER" }

[mcp_servers.multi.env]
LONG = """
` + dbPassword + `
"""
AFTER = "x"
`, []string{
			`# [REDACTED]`,
			`"awslabs.aws-api-mcp-server",  # the server`,
			`"--access-key", "[REDACTED]",`,
			`"--secret=[REDACTED]",`,
			`env = { AWS_SECRET_ACCESS_KEY = "[REDACTED]", "AWS_REGION" = "[REDACTED]" } # keys`,
			`SLACK = "[REDACTED]"`,
			`REF = "${SLACK_TOKEN}"`,
			`url = "https://user:[REDACTED]@mcp.example.com/mcp"`,
			`bearer_token = "[REDACTED]"`,
			`http_headers = { "X-Api-Key" = "[REDACTED]" }`,
			`env_http_headers = { "Authorization" = "[REDACTED]" }`,
			`LONG = "[REDACTED]"`,
			`AFTER = "[REDACTED]"`, // the lines after a multi-line string keep their numbers
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := []byte(tt.file)
			orig := bytes.Clone(file)
			ra, rb, err := Files(nil, file, tt.syntax)
			if err != nil {
				t.Fatal(err)
			}
			if len(ra) != 0 {
				t.Errorf("an absent file shows %q", ra)
			}
			if !bytes.Equal(file, orig) {
				t.Fatal("Files changed the file it was given")
			}
			shown := string(rb)
			for _, s := range secrets {
				if strings.Contains(shown, s) {
					t.Errorf("shows %q:\n%s", s, shown)
				}
			}
			if got, want := strings.Count(shown, "\n"), strings.Count(tt.file, "\n"); got != want {
				t.Errorf("%d lines shown, the file has %d:\n%s", got, want, shown)
			}
			// Each line is shown at its number: as written, or redacted.
			origLines := strings.Split(tt.file, "\n")
			lines := map[string]bool{}
			for i, l := range strings.Split(shown, "\n") {
				lines[strings.TrimSpace(l)] = true
				if l != "" && !strings.Contains(l, Redaction) && i < len(origLines) && l != origLines[i] {
					t.Errorf("line %d shown as %q, is %q", i+1, l, origLines[i])
				}
			}
			for _, w := range tt.want {
				if !lines[w] {
					t.Errorf("no line %q in\n%s", w, shown)
				}
			}
			// The same file on both sides: shown alike, nothing changed.
			ra, rb, err = Files(file, file, tt.syntax)
			if err != nil || !bytes.Equal(ra, rb) || strings.Contains(string(rb), RedactionChanged) {
				t.Errorf("a file against itself: %v\n%s\n%s", err, ra, rb)
			}
		})
	}
}

// TestFilesTellsAChangedSecret: a secret whose value changed shows as
// RedactionChanged on the new side, wherever it is (env, header, an arg,
// a URL's password, a TOML table), so that the line differs as the value
// does; one that did not change, or is new, shows as Redaction.
func TestFilesTellsAChangedSecret(t *testing.T) {
	for _, tt := range []struct {
		name     string
		syntax   Syntax
		old, new string
		wantOld  string
		wantNew  string
	}{
		{"json", JSON,
			`{"s": {"env": {"T": "` + ghToken + `", "U": "` + shortEnv + `"}, "args": ["--token=` + slackBot + `"], "url": "https://u:` + urlPass + `@h/"}}`,
			`{"s": {"env": {"T": "` + ghToken + `x", "U": "` + shortEnv + `", "N": "` + dbPassword + `"}, "args": ["--token=` + slackBot + `y"], "url": "https://u:` + urlPass + `z@h/"}}`,
			`{"s": {"env": {"T": "[REDACTED]", "U": "[REDACTED]"}, "args": ["--token=[REDACTED]"], "url": "https://u:[REDACTED]@h/"}}`,
			`{"s": {"env": {"T": "[REDACTED, changed]", "U": "[REDACTED]", "N": "[REDACTED]"}, "args": ["--token=[REDACTED, changed]"], "url": "https://u:[REDACTED, changed]@h/"}}`},
		{"toml", TOML,
			"[mcp_servers.a.env]\nT = \"" + ghToken + "\"\nU = \"" + shortEnv + "\"\n",
			"[mcp_servers.a.env]\nT = \"" + stripeKey + "\"\nU = \"" + shortEnv + "\"\n",
			"[mcp_servers.a.env]\nT = \"[REDACTED]\"\nU = \"[REDACTED]\"\n",
			"[mcp_servers.a.env]\nT = \"[REDACTED, changed]\"\nU = \"[REDACTED]\"\n",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ra, rb, err := Files([]byte(tt.old), []byte(tt.new), tt.syntax)
			if err != nil {
				t.Fatal(err)
			}
			if string(ra) != tt.wantOld || string(rb) != tt.wantNew {
				t.Errorf("shown:\n%s\n%s\nwant:\n%s\n%s", ra, rb, tt.wantOld, tt.wantNew)
			}
		})
	}
}

// TestFilesRefusesWhatDoesNotParse: a file that cannot be parsed cannot
// be redacted; Files says so rather than show it.
func TestFilesRefusesWhatDoesNotParse(t *testing.T) {
	for _, tt := range []struct {
		syntax Syntax
		file   string
	}{
		{JSON, `{"mcpServers": {"a": {"env": {"T": "` + ghToken + `"}`},
		{TOML, "[mcp_servers.a.env]\nT = \"" + ghToken + "\n"},
	} {
		if ra, rb, err := Files([]byte(tt.file), []byte("{}"), tt.syntax); err == nil {
			t.Errorf("%q: no error, shown %q %q", tt.file, ra, rb)
		}
	}
}

// FuzzFiles: whatever the file, Files does not panic, and what it shows
// of a file that parses has the file's lines.
func FuzzFiles(f *testing.F) {
	f.Add([]byte(`{"a": {"env": {"T": "x"}, "args": ["--token", "y"]}} // c`), false)
	f.Add([]byte("a = \"\"\"\nx\n\"\"\" # t\n[b.env]\nT = 'y'\nargs = [\"--token\", # c\n \"z\"]\n"), true)
	f.Add([]byte("/* a\r\nb */ {\"headers\": {\"A\": 1}}"), false)
	f.Fuzz(func(t *testing.T, data []byte, toml bool) {
		syntax := JSON
		if toml {
			syntax = TOML
		}
		ra, rb, err := Files(data, data, syntax)
		if err != nil {
			return
		}
		if !bytes.Equal(ra, rb) {
			t.Errorf("a file shows two ways:\n%s\n%s", ra, rb)
		}
		if got, want := bytes.Count(ra, []byte("\n")), bytes.Count(data, []byte("\n")); got != want {
			t.Errorf("%d lines shown of %d:\n%q\n%q", got, want, ra, data)
		}
	})
}

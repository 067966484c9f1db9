package config

import (
	"strings"
	"testing"
)

func TestRedactArgs(t *testing.T) {
	const r = Redaction
	tests := []struct {
		name       string
		args, want []string
	}{
		{"plain npx", []string{"-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"},
			[]string{"-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"}},
		{"flag=value", []string{"--token=abc", "--api-key=xyz", "--password=hunter2", "--clientSecret=s"},
			[]string{"--token=" + r, "--api-key=" + r, "--password=" + r, "--clientSecret=" + r}},
		{"flag value", []string{"--token", "abc", "-p", "8080", "--api-key", "k", "--verbose"},
			[]string{"--token", r, "-p", "8080", "--api-key", r, "--verbose"}},
		{"secret flag followed by a flag", []string{"--auth", "--port", "1"}, []string{"--auth", "--port", "1"}},
		{"non-secret flags keep values", []string{"--keyboard=us", "--max-old-space-size=256", "--root", "/srv"},
			[]string{"--keyboard=us", "--max-old-space-size=256", "--root", "/srv"}},
		{"bearer", []string{"--header", "Authorization: Bearer abc.def", "Basic dXNlcjpwYXNz"},
			[]string{"--header", "Authorization: Bearer " + r, "Basic " + r}},
		{"header style", []string{"--header", "Authorization:${AUTH_HEADER}", "X-Api-Key: k1", "Accept: text/plain"},
			[]string{"--header", "Authorization:" + r, "X-Api-Key: " + r, "Accept: text/plain"}},
		{"docker -e", []string{"run", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "-e", "GITHUB_TOKEN=ghp_x", "-e", "LOG_LEVEL=debug"},
			[]string{"run", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "-e", "GITHUB_TOKEN=" + r, "-e", "LOG_LEVEL=debug"}},
		{"known token shapes", []string{"ghp_0123456789abcdefghijklmnopqrstuvwxyz", "sk-proj-abcdefghijklmnop", "xoxb-1234-5678-abcdefghijkl",
			"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "123e4567-e89b-12d3-a456-426614174000"},
			[]string{r, r, r, r, r}},
		{"high entropy", []string{"a8Fk2LmQ9zXc7VbN3pRt6Ys1", "--flag=Zq8Rk3Lm9Xv2Bn7Tc4Wp6Yd1"},
			[]string{r, "--flag=" + r}},
		{"low entropy and words stay", []string{"aaaaaaaaaaaaaaaaaaaaaaaa111", "mcp-server-kubernetes-2024", "node_modules-v18-x64",
			"@modelcontextprotocol/server-everything@2025.1.14", "/home/user/projects/my-app", "0123456789012345678901"},
			[]string{"aaaaaaaaaaaaaaaaaaaaaaaa111", "mcp-server-kubernetes-2024", "node_modules-v18-x64",
				"@modelcontextprotocol/server-everything@2025.1.14", "/home/user/projects/my-app", "0123456789012345678901"}},
		{"urls", []string{"https://user:pw@h.example/mcp?api_key=abc&mode=x", "https://actions.example.com/mcp/a8Fk2LmQ9zXc7VbN3pRt6Ys1/sse",
			"--url=https://h/mcp?token=t&q=1"},
			[]string{"https://user:" + r + "@h.example/mcp?api_key=" + r + "&mode=x", "https://actions.example.com/mcp/" + r + "/sse",
				"--url=https://h/mcp?token=" + r + "&q=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RedactArgs(tt.args)
			eq(t, "redacted", got, tt.want)
		})
	}
}

func TestRedacted(t *testing.T) {
	env := envOf(map[string]string{"GH": "ghp_0123456789abcdefghijklmnopqrstuvwxyz", "PW": "hunter2", "HOST": "h.example", "DIR": "/srv"})
	cfg := mustParse(t, `{"mcpServers": {
		"gh": {"command": "docker", "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
		       "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GH}"}},
		"pw": {"command": "db-mcp", "args": ["--db", "${DIR}/data.db", "${PW}", "--name", "my db", "--password", "${PW}"]},
		"remote": {"url": "https://${HOST}/mcp?key=literal", "headers": {"Authorization": "Bearer ${GH}", "X-Secret": "plain-secret"}},
		"basic": {"url": "https://admin:pass123@h.example/sse", "type": "sse"}
	}}`, LoadOptions{LookupEnv: env})
	tests := []struct{ server, want string }{
		{"gh", "docker run -i --rm -e GITHUB_PERSONAL_ACCESS_TOKEN ghcr.io/github/github-mcp-server"},
		// Values that came from the environment show as their references.
		{"pw", "db-mcp --db ${DIR}/data.db ${PW} --name 'my db' --password [REDACTED]"},
		{"remote", "https://${HOST}/mcp?key=[REDACTED]"},
		{"basic", "https://admin:[REDACTED]@h.example/sse"},
	}
	for _, tt := range tests {
		s := cfg.Server(tt.server)
		got := s.Redacted()
		if got != tt.want {
			t.Errorf("%s: Redacted() = %q, want %q", tt.server, got, tt.want)
		}
		for _, secret := range []string{"ghp_", "hunter2", "plain-secret", "pass123", "literal"} {
			if strings.Contains(got, secret) {
				t.Errorf("%s: %q shows %q", tt.server, got, secret)
			}
		}
	}
	// A Server built by hand (no raw text) shows its expanded fields.
	s := &Server{Kind: KindStdio, Command: "/usr/bin/srv", Args: []string{"--token", "abc", "it's"}}
	if got, want := s.Redacted(), `/usr/bin/srv --token [REDACTED] 'it'\''s'`; got != want {
		t.Errorf("hand-built: %q, want %q", got, want)
	}
}

func TestSecretName(t *testing.T) {
	for _, n := range []string{"token", "API_KEY", "apiKey", "x-api-key", "GITHUB_PERSONAL_ACCESS_TOKEN", "client-secret", "passwd", "pwd", "auth", "Authorization", "session"} {
		if !secretName(n) {
			t.Errorf("secretName(%q) = false", n)
		}
	}
	for _, n := range []string{"port", "keyboard", "monkey", "verbose", "root", "y", "name", "path", "host"} {
		if secretName(n) {
			t.Errorf("secretName(%q) = true", n)
		}
	}
}

package redact

import (
	"slices"
	"testing"
)

func TestArgs(t *testing.T) {
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
			[]string{"--header", "Authorization:${AUTH_HEADER}", "X-Api-Key: " + r, "Accept: text/plain"}},
		// A reference is not a secret: shown as written, after a secret
		// flag too; a default in one is a literal, redacted as one.
		{"references", []string{"--token", "${GITHUB_TOKEN}", "--api-key=${env:KEY}", "Bearer ${T}", "-e", "TOKEN=${T:-ghp_0123456789abcdefghijkl}",
			"--password", "${PW:-hunter2}", "${X:-sk-live-0123456789abcdefghij}", "${HOME}/data"},
			[]string{"--token", "${GITHUB_TOKEN}", "--api-key=${env:KEY}", "Bearer ${T}", "-e", "TOKEN=${T:-" + r + "}",
				"--password", "${PW:-" + r + "}", "${X:-" + r + "}", "${HOME}/data"}},
		{"literal around a reference", []string{"--token=ghp_0123456789abcdefghijkl${SUFFIX}", "Authorization: Bearer sk-live-0123456789abcdefghij"},
			[]string{"--token=" + r + "${SUFFIX}", "Authorization: Bearer " + r}},
		{"url credentials", []string{"https://${USER}:${PASS}@h.example/x?api_key=${K}&token=lit", "https://ghp_0123456789abcdefghijkl@h.example/"},
			[]string{"https://${USER}:${PASS}@h.example/x?api_key=${K}&token=" + r, "https://" + r + "@h.example/"}},
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
			if got := Args(tt.args); !slices.Equal(got, tt.want) {
				t.Errorf("redacted = %q, want %q", got, tt.want)
			}
		})
	}
}

// Secret hides a value secret by its place whole, but for the
// references in it.
func TestSecret(t *testing.T) {
	const r = Redaction
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"hunter2", r},
		{"--max-old-space-size=256", r},
		{"ghp_0123456789abcdefghijklmnopqrstuvwxyz", r},
		{"Bearer ghp_0123456789abcdefghijklmnopqrstuvwxyz", r},
		{"${GITHUB_TOKEN}", "${GITHUB_TOKEN}"},
		{"Bearer ${GITHUB_TOKEN}", "Bearer ${GITHUB_TOKEN}"},
		{"${env:API_KEY}", "${env:API_KEY}"},
		{"${HOME}/.cache", "${HOME}/.cache"},
		{"${TOKEN:-xoxb-1234-5678-abcdefghijkl}", "${TOKEN:-" + r + "}"},
		{"${TOKEN:-}", "${TOKEN:-}"},
		{"ghp_0123456789abcdefghijkl${SUFFIX}", r + "${SUFFIX}"},
		{"https://user:pw@${HOST}/", "https://user:" + r + "@${HOST}/"},
	} {
		if got := Secret(tt.in); got != tt.want {
			t.Errorf("Secret(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSecretName(t *testing.T) {
	for _, n := range []string{"token", "API_KEY", "apiKey", "x-api-key", "GITHUB_PERSONAL_ACCESS_TOKEN", "client-secret", "passwd", "pwd", "auth", "Authorization", "session"} {
		if !SecretName(n) {
			t.Errorf("SecretName(%q) = false", n)
		}
	}
	for _, n := range []string{"port", "keyboard", "monkey", "verbose", "root", "y", "name", "path", "host"} {
		if SecretName(n) {
			t.Errorf("SecretName(%q) = true", n)
		}
	}
}

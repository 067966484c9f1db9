package config

import (
	"fmt"
	"strings"
	"testing"
)

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
		{"pw", "db-mcp --db ${DIR}/data.db ${PW} --name 'my db' --password ${PW}"},
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

// A config that replaces another for the same server (a reload) hides
// what the other's references resolved to, before and after the
// replacement, and keeps only the latest maxResolved values.
func TestCarryResolved(t *testing.T) {
	old, cur := &Server{Name: "s"}, &Server{Name: "s"}
	old.NoteResolved("before-value-1")
	cur.CarryResolved(old)
	old.NoteResolved("after-value-2") // a launch of old still resolving
	if got := cur.RedactText("before-value-1 after-value-2"); got != "[redacted] [redacted]" {
		t.Errorf("the new config shows %q", got)
	}
	next := &Server{Name: "s"}
	next.CarryResolved(cur)
	old.NoteResolved("late-value-3")
	if got := next.RedactText("before-value-1 late-value-3"); got != "[redacted] [redacted]" {
		t.Errorf("two reloads on: %q", got)
	}
	for i := range 2 * maxResolved {
		old.NoteResolved(fmt.Sprintf("value-%06d", i))
	}
	if n := len(next.resolved); n != maxResolved {
		t.Errorf("%d values kept, want %d", n, maxResolved)
	}
	cur.CarryResolved(cur) // no cycle
	cur.NoteResolved("self-value-4")
}

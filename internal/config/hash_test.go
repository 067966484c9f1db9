package config

import (
	"fmt"
	"regexp"
	"testing"
	"time"
)

func TestLaunchHash(t *testing.T) {
	base := func() *Server {
		return &Server{Name: "a", Kind: KindStdio, Transport: TransportStdio, Command: "npx",
			Args: []string{"-y", "pkg"}, Env: map[string]string{"A": "1", "B": "2"}, Cwd: "/w"}
	}
	h := base().LaunchHash()
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(h) {
		t.Fatalf("hash %q is not sha256 hex", h)
	}
	// Stable: same fields give the same hash, whatever the map order or
	// the settings that do not affect the launch.
	for i := 0; i < 20; i++ {
		s := base()
		s.Env = map[string]string{"B": "2", "A": "1"}
		s.Name, s.IdleTimeout, s.Prefix, s.Disabled = "other", time.Hour, "p", true
		if got := s.LaunchHash(); got != h {
			t.Fatalf("hash changed without a launch change: %s vs %s", got, h)
		}
	}
	changes := map[string]func(s *Server){
		"command":       func(s *Server) { s.Command = "node" },
		"arg":           func(s *Server) { s.Args[1] = "pkg@2" },
		"extra arg":     func(s *Server) { s.Args = append(s.Args, "") },
		"args split":    func(s *Server) { s.Args = []string{"-y pkg"} },
		"args joined":   func(s *Server) { s.Args = []string{"-", "y", "pkg"} },
		"env value":     func(s *Server) { s.Env["A"] = "2" },
		"env key":       func(s *Server) { s.Env = map[string]string{"A": "1", "C": "2"} },
		"env added":     func(s *Server) { s.Env["C"] = "" },
		"env/arg shift": func(s *Server) { s.Args = append(s.Args, "A"); delete(s.Env, "A") },
		"cwd":           func(s *Server) { s.Cwd = "/x" },
		"kind":          func(s *Server) { s.Kind = KindHTTP },
		"transport":     func(s *Server) { s.Transport = TransportSSE },
		"url":           func(s *Server) { s.URL = "https://h/" },
		"headers":       func(s *Server) { s.Headers = map[string]string{"X": "1"} },
		"protocol":      func(s *Server) { s.Protocol = ProtocolLegacy },
	}
	seen := map[string]string{h: "base"}
	for name, change := range changes {
		s := base()
		change(s)
		got := s.LaunchHash()
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: hash equals that of %s", name, prev)
		}
		seen[got] = name
	}
}

// TestLaunchHashFromConfig checks the hash follows the expanded command
// and the references of args as written, not their values: a secret
// changes at the next start, and no value is hashed.
func TestLaunchHashFromConfig(t *testing.T) {
	doc := `{"mcpServers": {"a": {"command": "${BIN}", "args": ["${V}"], "idleTimeout": "%s"}}}`
	hash := func(timeout string, env map[string]string) string {
		return mustParse(t, fmt.Sprintf(doc, timeout), LoadOptions{LookupEnv: envOf(env)}).Server("a").LaunchHash()
	}
	one := hash("1m", map[string]string{"BIN": "srv", "V": "1"})
	same := hash("5m", map[string]string{"BIN": "srv", "V": "1"})
	sameRef := hash("1m", map[string]string{"BIN": "srv", "V": "2"})
	two := hash("1m", map[string]string{"BIN": "srv2", "V": "1"})
	if one != same || one != sameRef || one == two {
		t.Errorf("one %s same %s sameRef %s two %s", one, same, sameRef, two)
	}
}

func TestFilter(t *testing.T) {
	tests := []struct {
		name   string
		f      Filter
		allow  []string
		reject []string
	}{
		{"empty filter allows all", Filter{}, []string{"a", "write_file", ""}, nil},
		{"deny only", Filter{Deny: []string{"write_*", "delete"}}, []string{"read_file", "deleted"}, []string{"write_file", "delete"}},
		{"allow only", Filter{Allow: []string{"read_*", "list?"}}, []string{"read_file", "lists"}, []string{"write_file", "list", "listed"}},
		{"allow then deny", Filter{Allow: []string{"*_file"}, Deny: []string{"write_*"}}, []string{"read_file"}, []string{"write_file", "search"}},
		{"empty allow list allows none", Filter{Allow: []string{}}, nil, []string{"a", ""}},
		{"classes", Filter{Allow: []string{"[a-c]*"}, Deny: []string{"*[0-9]"}}, []string{"alpha", "beta"}, []string{"delta", "a1"}},
		{"star does not cross slash", Filter{Allow: []string{"ns*"}}, []string{"ns_x"}, []string{"ns/x"}},
		{"escaped star", Filter{Deny: []string{`\*`}}, []string{"a"}, []string{"*"}},
	}
	for _, tt := range tests {
		for _, n := range tt.allow {
			if !tt.f.Allowed(n) {
				t.Errorf("%s: %q rejected", tt.name, n)
			}
		}
		for _, n := range tt.reject {
			if tt.f.Allowed(n) {
				t.Errorf("%s: %q allowed", tt.name, n)
			}
		}
	}
}

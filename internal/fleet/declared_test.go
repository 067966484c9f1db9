package fleet

import (
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
)

// What each instance is declared at initialize: a shared server's shared
// instance, all mcpvisor carries (nil: the backend's default) or what its
// config narrows that to; a per-session server's shared instance, which
// only learns the lists, nothing (narrowed: still nothing).
func TestDeclaredToEachInstance(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"shared", `{"mcpServers":{"x":{"command":"x"}}}`, ""},
		{"shared, narrowed", `{"mcpServers":{"x":{"command":"x","clientCapabilities":["sampling"]}}}`, `{"sampling":{}}`},
		{"per-session", `{"mcpServers":{"x":{"command":"x","sharing":"per-session"}}}`, `{}`},
		{"per-session, narrowed", `{"mcpServers":{"x":{"command":"x","sharing":"per-session","clientCapabilities":["roots"]}}}`, `{}`},
		{"remote, narrowed", `{"mcpServers":{"x":{"url":"http://127.0.0.1:1/mcp","clientCapabilities":["roots"]}}}`, `{"roots":{"listChanged":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tc.doc), "t.json", config.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := New(cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			s := f.Get("x")
			var got string
			switch c := f.connector(s.Config(), instHooks{in: s.sharedIn()}, nil).(type) {
			case *backend.StdioConnector:
				got = string(c.Capabilities)
			case *backend.HTTPConnector:
				got = string(c.Capabilities)
			default:
				t.Fatalf("connector %T", c)
			}
			if got != tc.want {
				t.Errorf("declared %q, want %q", got, tc.want)
			}
		})
	}
}

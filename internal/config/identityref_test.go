package config

import (
	"strings"
	"testing"
)

// A reference to the identity an instance runs for is a config error in
// a server that runs for none, naming the field; a per-identity server
// may use it in env, args and headers.
func TestIdentityReferencesOnlyPerIdentity(t *testing.T) {
	for _, tc := range []struct{ server, path string }{
		{`{"command":"x","env":{"U":"${identity.sub}"}}`, "mcpServers.s.env.U"},
		{`{"command":"x","args":["--user","${keyring:tok@identity}"]}`, "mcpServers.s.args[1]"},
		{`{"command":"x","sharing":"per-session","env":{"K":"a-${identity.key}"}}`, "mcpServers.s.env.K"},
		{`{"url":"https://example.com/mcp","headers":{"Authorization":"Bearer ${keyring:tok@identity}"}}`, "mcpServers.s.headers.Authorization"},
	} {
		_, err := Parse([]byte(`{"mcpServers":{"s":`+tc.server+`}}`), "test.json", LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
		if err == nil || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), `"per-identity"`) {
			t.Errorf("%s: %v, want an error at %s", tc.server, err, tc.path)
		}
	}
	for _, srv := range []string{
		`{"command":"x","sharing":"per-identity","env":{"U":"${identity.sub}"},"args":["${keyring:tok@identity}"]}`,
		`{"url":"https://example.com/mcp","sharing":"per-identity","headers":{"Authorization":"Bearer ${keyring:tok@identity}","X-User":"${identity.key}"}}`,
	} {
		if _, err := Parse([]byte(`{"mcpServers":{"s":`+srv+`}}`), "test.json", LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }}); err != nil {
			t.Errorf("%s: %v", srv, err)
		}
	}
}

package login

import "testing"

// login --gateway takes a token only for the deployment it reaches: a
// resource of another origin is refused unless serve is reached on the
// machine's own loopback address.
func TestSameResource(t *testing.T) {
	for _, c := range []struct {
		api, resource string
		ok            bool
	}{
		{"https://mcp.example.com/", "https://mcp.example.com", true},
		{"https://MCP.example.com/", "https://mcp.example.com", true},
		{"http://127.0.0.1:7331/", "https://mcp.corp.example", true},
		{"http://localhost:7331/", "https://mcp.corp.example", true},
		{"https://evil.example/", "https://mcp.corp.example", false},
		{"http://mcp.example.com/", "https://mcp.example.com", false},
		{"https://mcp.example.com:8443/", "https://mcp.example.com", false},
	} {
		if err := sameResource(c.api, c.resource); (err == nil) != c.ok {
			t.Errorf("sameResource(%s, %s) = %v, want ok %v", c.api, c.resource, err, c.ok)
		}
	}
}

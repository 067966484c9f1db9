package authn

import (
	"encoding/json"
	"net/http"
	"strings"
)

// WellKnownResource is RFC 9728's well-known path segment.
const WellKnownResource = "/.well-known/oauth-protected-resource"

// MetadataPath is where the protected resource metadata of the endpoint
// at endpointPath is served (RFC 9728 §3.1: the well-known segment goes
// between the host and the path): "/mcp" → "/.well-known/oauth-protected-resource/mcp".
// A trailing slash of endpointPath is dropped; "" or "/" gives the bare
// well-known path.
func MetadataPath(endpointPath string) string {
	p := strings.TrimRight(endpointPath, "/")
	if p != "" && !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return WellKnownResource + p
}

// Metadata is an RFC 9728 protected resource metadata document.
type Metadata struct {
	// Resource is the endpoint's public URL (its RFC 8707 resource
	// identifier), never derived from a request's Host header.
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported,omitempty"`
	// BearerMethodsSupported is ["header"]: mcpvisor reads tokens only
	// from the Authorization header. Handler fills it when empty.
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// Handler serves m: GET and HEAD, with CORS open to any origin (the
// document is public and browser-based MCP clients fetch it cross-origin)
// and OPTIONS for their preflight; other methods get 405.
func (m Metadata) Handler() http.Handler {
	if len(m.BearerMethodsSupported) == 0 {
		m.BearerMethodsSupported = []string{"header"}
	}
	body, err := json.Marshal(m)
	if err != nil {
		panic("authn: metadata does not marshal: " + err.Error())
	}
	body = append(body, '\n')
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		switch r.Method {
		case http.MethodOptions:
			h.Set("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Content-Type, MCP-Protocol-Version")
			h.Set("Access-Control-Max-Age", "86400")
			w.WriteHeader(http.StatusNoContent)
		case http.MethodGet, http.MethodHead:
			h.Set("Content-Type", "application/json")
			h.Set("Cache-Control", "max-age=300")
			w.WriteHeader(http.StatusOK)
			if r.Method == http.MethodGet {
				w.Write(body)
			}
		default:
			h.Set("Allow", "GET, HEAD, OPTIONS")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	})
}

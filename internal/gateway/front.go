package gateway

import (
	"net/http"
	"strings"
)

// ServerPattern is the ServeMux pattern of a server's own endpoint; the
// name is the path value "name".
const ServerPattern = "/servers/{name}/mcp"

// NamedHandler serves /servers/{name}/mcp with the name given, as a
// path value need not be (Front calls it so).
type NamedHandler interface {
	ServeNamed(w http.ResponseWriter, r *http.Request, name string)
}

// Front serves /mcp and /servers/{name}/mcp itself and every other
// request through a fallback, the ServeMux that also has those two
// routes. A path in the plain form clients use (unescaped, clean) is
// matched by a few comparisons: ServeMux's general matching cost a
// relayed call about 1 µs under load (issue 30). Any other form of those
// paths — escaped, not clean — is the fallback's to match or redirect.
type Front struct {
	fallback http.Handler
	mcp      http.Handler
	server   func(w http.ResponseWriter, r *http.Request, name string)
}

// NewFront is the front of fallback, which serves /mcp with mcp and
// ServerPattern with servers. If servers is a NamedHandler it is given
// the name directly; otherwise (a wrapper, such as tracing's) the name
// is set as the path value "name", as the mux would.
func NewFront(fallback, mcp, servers http.Handler) *Front {
	f := &Front{fallback: fallback, mcp: mcp}
	if n, ok := servers.(NamedHandler); ok {
		f.server = n.ServeNamed
	} else {
		f.server = func(w http.ResponseWriter, r *http.Request, name string) {
			r.SetPathValue("name", name)
			servers.ServeHTTP(w, r)
		}
	}
	return f
}

func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawPath == "" {
		if r.URL.Path == "/mcp" {
			f.mcp.ServeHTTP(w, r)
			return
		}
		if name, ok := ServerPath(r.URL.Path); ok {
			f.server(w, r, name)
			return
		}
	}
	f.fallback.ServeHTTP(w, r)
}

// ServerPath is the name in path when path is /servers/{name}/mcp with a
// name ServeMux would take as it is: not empty, no slash, neither "." nor
// "..".
func ServerPath(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/servers/")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, "/mcp")
	if !ok || name == "" || name == "." || name == ".." || strings.IndexByte(name, '/') >= 0 {
		return "", false
	}
	return name, true
}

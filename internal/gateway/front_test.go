package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Front takes /mcp and /servers/{name}/mcp past the mux only where the
// mux would serve the same handler with the same name: every other path,
// or form of those paths, is the mux's, redirects included.
func TestFrontRoutesAsTheMux(t *testing.T) {
	type hit struct{ route, name string }
	var got hit
	handler := func(route string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = hit{route, r.PathValue("name")}
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", handler("mcp"))
	mux.Handle(ServerPattern, handler("server"))
	mux.Handle("/api/", handler("api"))
	mux.Handle("/", handler("other"))
	var fast int
	front := NewFront(mux, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fast++
		handler("mcp").ServeHTTP(w, r)
	}), namedFunc(func(w http.ResponseWriter, r *http.Request, name string) {
		fast++
		got = hit{"server", name}
	}))
	for _, c := range []struct {
		target string
		fast   bool // served past the mux
	}{
		{"/mcp", true},
		{"/mcp?x=1", true},
		{"/servers/x/mcp", true},
		{"/servers/my-server_2.v1/mcp", true},
		{"/servers/...../mcp", true},
		{"/servers/x%20y/mcp", true}, // Go's URL keeps no RawPath for it
		{"/servers/a%2Fb/mcp", false},
		{"/servers%2Fx/mcp", false}, // one segment to the mux: "/"
		{"/%6Dcp", false},
		{"/servers/%41/mcp", false},
		{"/servers/x/mcp/", false},
		{"/servers//mcp", false},
		{"/servers/./mcp", false},
		{"/servers/../mcp", false},
		{"/servers/a/b/mcp", false},
		{"/servers/x/../y/mcp", false},
		{"/servers/mcp", false},
		{"/mcp/", false},
		{"/mcp/x", false},
		{"//mcp", false},
		{"/api/servers", false},
		{"/", false},
	} {
		t.Run(c.target, func(t *testing.T) {
			got = hit{}
			want := httptest.NewRecorder()
			mux.ServeHTTP(want, httptest.NewRequest("POST", c.target, nil))
			wantHit := got

			got, fast = hit{}, 0
			rec := httptest.NewRecorder()
			front.ServeHTTP(rec, httptest.NewRequest("POST", c.target, nil))
			if got != wantHit || rec.Code != want.Code || rec.Header().Get("Location") != want.Header().Get("Location") {
				t.Errorf("front: %+v %d %q; mux: %+v %d %q", got, rec.Code, rec.Header().Get("Location"),
					wantHit, want.Code, want.Header().Get("Location"))
			}
			if (fast == 1) != c.fast {
				t.Errorf("served past the mux: %v, want %v", fast == 1, c.fast)
			}
		})
	}
}

// namedFunc is a NamedHandler (and, for the mux, an http.Handler that
// reads the name as a path value).
type namedFunc func(w http.ResponseWriter, r *http.Request, name string)

func (f namedFunc) ServeNamed(w http.ResponseWriter, r *http.Request, name string) { f(w, r, name) }
func (f namedFunc) ServeHTTP(w http.ResponseWriter, r *http.Request)               { f(w, r, r.PathValue("name")) }

// fakeRoutes records how a request to /servers/{name}/mcp reached it.
type fakeRoutes struct{ via, name string }

func (f *fakeRoutes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.via, f.name = "ServeHTTP", r.PathValue("name")
}

func (f *fakeRoutes) ServeNamed(w http.ResponseWriter, r *http.Request, name string) {
	f.via, f.name = "ServeNamed", name
}

// NewFront hands a server's request to a NamedHandler with its name
// directly, and to any other handler (a wrapper, as tracing's) with the
// name as a path value, as the mux would — on the fast path and through
// the mux alike.
func TestNewFrontGivesTheName(t *testing.T) {
	for _, wrapped := range []bool{false, true} {
		routes := &fakeRoutes{}
		var servers http.Handler = routes
		var wrapperSaw string
		if wrapped {
			servers = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				wrapperSaw = r.PathValue("name")
				routes.ServeHTTP(w, r)
			})
		}
		mux := http.NewServeMux()
		mux.Handle("/mcp", http.NotFoundHandler())
		mux.Handle(ServerPattern, servers)
		front := NewFront(mux, http.NotFoundHandler(), servers)
		for _, target := range []string{"/servers/my-server/mcp", "/servers/my%2Dserver/mcp"} { // fast path, then the mux's
			*routes, wrapperSaw = fakeRoutes{}, ""
			front.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", target, nil))
			want := fakeRoutes{"ServeNamed", "my-server"}
			if wrapped || target != "/servers/my-server/mcp" {
				want.via = "ServeHTTP" // through servers, a path value
			}
			if *routes != want || wrapped && wrapperSaw != "my-server" {
				t.Errorf("wrapped %v, %s: routes got %+v (the wrapper saw %q), want %+v", wrapped, target, *routes, wrapperSaw, want)
			}
		}
	}
}

package gateway

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/guard"
)

// ServerRouter serves ServerPattern, /servers/{name}/mcp: each server of
// the gateway's fleet alone, on a Streamable HTTP handler of its own. It
// owns those handlers: one per server the fleet has now, made on the
// server's first request, and retired once a reload removed the server
// (Sync). A name no server has is served by the unknown handler.
type ServerRouter struct {
	g       *Gateway
	opts    HTTPOptions
	unknown http.Handler

	mu     sync.Mutex
	byName map[string]*StreamableHandler
	// gone are the handlers of removed servers not yet closed: they
	// still serve the sessions they have (a client's answer to its
	// server's request, a cancellation) while the server drains.
	gone   map[string][]*StreamableHandler
	closed bool

	// retiring closes removed servers' handlers once their drains end;
	// done (closed by Close) cuts those waits short.
	retiring sync.WaitGroup
	done     chan struct{}

	// lookedUp, if set, is called (under mu) once a server was found by
	// name, before its handler is made: a test's seam, where a reload
	// can remove it.
	lookedUp func(name string)
}

// NewServerRouter returns the router of the servers of g's fleet (set
// with SetFleet first), whose handlers have opts; unknown serves a name
// no server has, with the path value "name" set to it.
func NewServerRouter(g *Gateway, opts HTTPOptions, unknown http.Handler) *ServerRouter {
	return &ServerRouter{g: g, opts: opts, unknown: unknown, byName: map[string]*StreamableHandler{}, done: make(chan struct{})}
}

func (r *ServerRouter) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.ServeNamed(w, req, req.PathValue("name"))
}

// ServerRouter takes the name from Front directly.
var _ NamedHandler = (*ServerRouter)(nil)

// ServeNamed serves req to the server named name (NamedHandler).
func (r *ServerRouter) ServeNamed(w http.ResponseWriter, req *http.Request, name string) {
	sid := req.Header.Get(hdrSessionID)
	r.mu.Lock()
	h := r.byName[name]
	if h == nil && !r.closed {
		// Made on a server's first request: a server no client addresses
		// by name (most, behind /mcp) costs no handler.
		h = r.open(name)
	}
	if olds := r.gone[name]; len(olds) > 0 && sid != "" && (h == nil || !h.HasSession(sid)) {
		for _, old := range olds {
			if old.HasSession(sid) {
				h = old // a session of the removed server's, which drains
				break
			}
		}
	}
	r.mu.Unlock()
	if h == nil {
		if req.PathValue("name") != name {
			req.SetPathValue("name", name) // the 404 names it
		}
		r.unknown.ServeHTTP(w, req)
		return
	}
	h.ServeHTTP(w, req)
}

// open makes and keeps the handler of the server named name, nil if the
// fleet has none (r.mu held). The server is looked up once and is the
// handler's endpoint: a reload that removes it meanwhile leaves the
// handler of a removed server (which refuses what it is asked), never
// one of no server; and that reload's Sync, which waits for r.mu, then
// retires it.
func (r *ServerRouter) open(name string) *StreamableHandler {
	s := r.g.fleet.Get(name)
	if s == nil {
		return nil
	}
	if r.lookedUp != nil {
		r.lookedUp(name)
	}
	opts := r.opts
	opts.Access.Route = guard.Route{Path: "/servers/" + name + "/mcp", Server: name}
	h := NewStreamableHandler(r.g.singleOf(s), opts)
	r.byName[name] = h
	return h
}

// Sync makes the handlers those of the fleet's servers now; a reload
// calls it once the new set of servers is served, with the Removed of
// its fleet.Applied. A removed server's endpoint answers a new session
// (and a request of no session it has) with the 404 of an unknown server
// at once; its handler — the calls it still relays, and the requests of
// its sessions, which may answer or cancel them — is served until the
// server's drain has ended (removed, by name; at once for a name not in
// it) and RetiredGrace more, and then closed.
func (r *ServerRouter) Sync(removed map[string]<-chan struct{}) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	want := map[string]bool{}
	for _, s := range r.g.fleet.Servers() {
		want[s.Name()] = true
	}
	gone := map[string]*StreamableHandler{}
	for name, h := range r.byName {
		if !want[name] {
			delete(r.byName, name)
			gone[name] = h
		}
	}
	var now []*StreamableHandler
	for name, h := range gone {
		drained := removed[name]
		if drained == nil {
			now = append(now, h)
			continue
		}
		if r.gone == nil {
			r.gone = map[string][]*StreamableHandler{}
		}
		r.gone[name] = append(r.gone[name], h)
		r.retiring.Go(func() { // under mu: Close cannot have begun waiting
			select {
			case <-drained:
				// Its calls are answered; its sessions are closed
				// RetiredGrace later, not at once: a client whose
				// session ends before it read an answer (the go-sdk's,
				// whose standalone stream is then refused) fails
				// that call.
				grace := time.NewTimer(RetiredGrace)
				select {
				case <-grace.C:
				case <-r.done:
					grace.Stop()
				}
			case <-r.done:
			}
			r.mu.Lock()
			r.gone[name] = slices.DeleteFunc(r.gone[name], func(x *StreamableHandler) bool { return x == h })
			if len(r.gone[name]) == 0 {
				delete(r.gone, name)
			}
			r.mu.Unlock()
			h.Close()
		})
	}
	r.mu.Unlock()
	for _, h := range now {
		h.Close() // outside mu: closing ends sessions, lookups go on
	}
}

// RetiredGrace is how long a removed server's endpoint keeps its sessions
// after its drain ended, so that its clients read the last answers.
const RetiredGrace = 2 * time.Second

// Close ends every server endpoint's sessions, those of removed servers
// still draining included (shutdown), and returns once every handler it
// holds or is retiring is closed; a handler that a Sync running
// meanwhile took out to close at once is closed by that Sync, which may
// finish after Close returns. A request after Close gets the unknown
// handler's answer. Once closed, Sync does nothing; Close again neither.
func (r *ServerRouter) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	all := r.byName
	r.byName, r.closed = nil, true
	close(r.done)
	r.mu.Unlock()
	r.retiring.Wait()
	for _, h := range all {
		h.Close()
	}
}

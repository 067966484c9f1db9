// Package gateway is mcpvisor's client-facing MCP server: the aggregated
// endpoint (every server's tools, prompts and resources under one session,
// names prefixed) and one endpoint per server (that server alone, every
// method forwarded), over Streamable HTTP and stdio. It relays bytes: it
// reads the JSON-RPC envelope and the few params it routes on, and passes
// results through untouched.
package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

// Version is reported as mcpvisor's serverInfo.version.
var Version = "0.1.0"

// Gateway routes client sessions to the fleet's servers and relays what the
// servers send back. It implements backend.Hooks.
type Gateway struct {
	fleet *fleet.Fleet
	log   *slog.Logger
	seq   atomic.Int64

	mu       sync.Mutex
	sessions map[*Session]*sessState
	calls    map[*backend.Conn][]*call // in flight, oldest first
	tokens   map[string]*call          // our progress token → call
	outReqs  map[string]*outReq        // our id of a server→client request → where it came from
	catalogs map[string]*catalog       // per server
	agg      *aggregate
	store    *store.Store // nil: nothing persisted
	pageSize int          // of the aggregated lists; 0: whole lists
}

// SetPageSize sets how many items one page of the aggregated endpoint's
// lists holds (0: whole lists, the default). Call before serving.
func (g *Gateway) SetPageSize(n int) { g.pageSize = max(n, 0) }

// New returns a gateway over f. Pass it as the fleet's backend.Hooks (the
// fleet is built first with a forwarding hook; see SetFleet).
func New(log *slog.Logger) *Gateway {
	if log == nil {
		log = slog.Default()
	}
	g := &Gateway{
		log:      log,
		sessions: map[*Session]*sessState{},
		calls:    map[*backend.Conn][]*call{},
		tokens:   map[string]*call{},
		outReqs:  map[string]*outReq{},
		catalogs: map[string]*catalog{},
	}
	g.agg = &aggregate{g: g}
	return g
}

// SetFleet attaches the fleet; call once before serving.
func (g *Gateway) SetFleet(f *fleet.Fleet) {
	g.fleet = f
	for _, s := range f.Servers() {
		g.catalogs[s.Name()] = &catalog{}
	}
}

// Aggregate is the endpoint that serves every server as one.
func (g *Gateway) Aggregate() Endpoint { return g.agg }

// Single is the endpoint of one server, or nil if there is none by that
// name.
func (g *Gateway) Single(name string) Endpoint {
	s := g.fleet.Get(name)
	if s == nil {
		return nil
	}
	return &single{g: g, srv: s}
}

// sessState is the gateway's per-session state.
type sessState struct {
	server   string // "" for the aggregated endpoint
	calls    map[string]*call
	subs     map[string]bool // resource URIs subscribed to
	caps     map[string]json.RawMessage
	closed   bool
	outReqs  map[string]*outReq
	protocol string
}

// call is a client request in flight on a backend.
type call struct {
	sess     *Session
	st       *sessState
	clientID json.RawMessage
	token    json.RawMessage // the client's progress token, if any
	ourTok   string
	related  Sink
	conn     *backend.Conn
	cancel   func(cause error)
	touch    func() // resets the request timeout
}

// outReq is a server→client request forwarded to a client session.
type outReq struct {
	conn      *backend.Conn
	backendID json.RawMessage
	sess      *Session
	timer     *time.Timer
}

func (g *Gateway) open(s *Session, server string) {
	g.mu.Lock()
	g.sessions[s] = &sessState{server: server, calls: map[string]*call{}, subs: map[string]bool{}, outReqs: map[string]*outReq{}}
	g.mu.Unlock()
}

func (g *Gateway) state(s *Session) *sessState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sessions[s]
}

func (g *Gateway) closeSession(s *Session) {
	g.mu.Lock()
	st := g.sessions[s]
	delete(g.sessions, s)
	var calls []*call
	var reqs []*outReq
	if st != nil && !st.closed {
		st.closed = true
		for _, c := range st.calls {
			calls = append(calls, c)
		}
		for id, r := range st.outReqs {
			reqs = append(reqs, r)
			delete(g.outReqs, id)
		}
	}
	g.mu.Unlock()
	for _, c := range calls {
		c.cancel(errSessionClosed)
	}
	// Give the cancelled requests a moment to end, so that their
	// cancellation notices are on their way to the servers before anyone
	// stops those servers.
	if len(calls) > 0 {
		deadline := time.Now().Add(100 * time.Millisecond)
		for time.Now().Before(deadline) {
			g.mu.Lock()
			n := len(st.calls)
			g.mu.Unlock()
			if n == 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	if st != nil {
		for _, srv := range g.fleet.Servers() {
			if srv.PerSession() && (st.server == "" || st.server == srv.Name()) {
				go srv.EndSession(context.Background(), s.Key())
			}
		}
	}
	for _, r := range reqs {
		r.timer.Stop()
		_ = r.conn.ReplyError(r.backendID, rpc.InternalError, "the client session ended before it answered")
	}
}

func (g *Gateway) nextID(prefix string) string {
	return prefix + strconv.FormatInt(g.seq.Add(1), 10)
}

// sessionsFor lists the sessions that see server name: the aggregated ones
// and that server's own.
func (g *Gateway) sessionsFor(name string) []*Session {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*Session
	for s, st := range g.sessions {
		if st.server == "" || st.server == name {
			out = append(out, s)
		}
	}
	return out
}

// errorResponse builds a JSON-RPC error response for the client.
func errorResponse(id json.RawMessage, code int, msg string) *rpc.Message {
	return &rpc.Message{ID: id, Error: &rpc.Error{Code: code, Message: msg}}
}

func resultResponse(id, result json.RawMessage) *rpc.Message {
	return &rpc.Message{ID: id, Result: result}
}

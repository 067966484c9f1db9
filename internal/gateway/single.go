package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/interest"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// frontVersions are the MCP revisions the front speaks, newest first.
var frontVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

const latestVersion = "2025-11-25"

func supported(v string) bool { return slices.Contains(frontVersions, v) }

// single is the endpoint of one server: every method is forwarded as it
// is, including methods mcpvisor does not know, except the handshake
// (mcpvisor's connection to the server is already initialized) and ping.
type single struct {
	g   *Gateway
	srv *fleet.Server
	// schemas indexes the annotated tools of the server's cached list,
	// made again when that list is another.
	schemas atomic.Pointer[schemaIndex]
}

// schemaIndex is the inputSchema of each tool of a list that has
// x-mcp-header annotations (see paramHeaderMismatch).
type schemaIndex struct {
	first  *json.RawMessage // the list it was made from: its first item, and length
	n      int
	byName map[string]json.RawMessage
}

func (e *single) Open(out Sink) *Session {
	s := NewSession(out)
	s.endpoint = e.srv
	e.g.reg.open(s, e.srv)
	return s
}

func (e *single) Close(s *Session) { e.g.closeSession(s) }

func (e *single) Handle(ctx context.Context, s *Session, m *rpc.Message, related Sink) *rpc.Message {
	return e.g.answer(ctx, s, m, nil, related, e)
}

// handle serves m, from w: a legacy session's message, or a modern
// request (which serveStateless has checked is of its revision: no
// initialize, notification or response, logging/setLevel or
// resources/subscribe ever comes from one).
func (e *single) handle(ctx context.Context, w sender, m *rpc.Message, related Sink) *rpc.Message {
	s := w.sess
	if s == nil {
		if refused := e.unusable(ctx, w, m); refused != nil {
			return refused
		}
		return e.request(ctx, w, m, related)
	}
	if e.g.clientMessage(s, m) {
		return nil
	}
	if m.IsNotification() {
		// To the instance that serves this session, never to other
		// sessions' private processes.
		e.g.notifyServer(e.srv, s, m)
		return nil
	}
	if m.IsResponse() {
		return nil
	}
	if refused := e.unusable(ctx, w, m); refused != nil {
		return refused
	}
	switch m.Method {
	case "initialize":
		// A dormant or never-started server answers from its cached
		// initialize result; it starts on the first real request.
		// Otherwise it starts now: a per-session instance is declared
		// what the client declared, recorded first.
		e.g.declareCaps(s, m)
		in, err := e.init(ctx, e.srv.InstanceKey(s.Key(), s.Identity()))
		if err != nil {
			return unavailable(m.ID, rpc.BackendUnavailable, err.Error(), err)
		}
		return e.g.initialize(s, m, in.Capabilities, in.ServerInfo, in.Instructions)
	case "resources/subscribe", "resources/unsubscribe":
		return e.g.forwardSubscription(ctx, s, e.srv, m, stringField(m.Params, "uri"), related)
	case "logging/setLevel":
		return e.g.setLevelSingle(ctx, s, e.srv, m, related)
	}
	return e.request(ctx, w, m, related)
}

// request serves a request of either era (and ping, which only a
// legacy session sends: the 2026-07-28 revision has none).
func (e *single) request(ctx context.Context, w sender, m *rpc.Message, related Sink) *rpc.Message {
	switch m.Method {
	case "ping":
		return resultResponse(m.ID, json.RawMessage(`{}`))
	case "tasks/get", "tasks/update", "tasks/cancel", "tasks/result", "tasks/list":
		return e.g.taskRequest(ctx, w, m, related, e.srv)
	case "tools/call":
		// A pinned server's tool is checked once leased, on the process
		// that serves it (begin).
		f := e.srv.Config().Tools
		if len(f.Allow) == 0 && len(f.Deny) == 0 {
			break
		}
		name := stringField(m.Params, "name")
		if !f.Allowed(name) {
			return errorResponse(m.ID, rpc.InvalidParams, "tool "+name+" is not allowed by mcpvisor's configuration")
		}
	case "tools/list":
		resp := e.g.forward(ctx, w, e.srv, m.Method, m.Params, m.ID, related)
		cfg := e.srv.Config()
		if f := cfg.Tools; (len(f.Allow) > 0 || len(f.Deny) > 0 || cfg.Pin) && resp.Result != nil {
			resp.Result = filterTools(resp.Result, func(t json.RawMessage) bool {
				return f.Allowed(stringField(t, "name")) && e.srv.Catalog().ToolVisible(t)
			})
		}
		return e.g.filterForPolicy(requestIdentity(ctx, w), e.srv, kindTools, resp)
	case "prompts/list":
		return e.g.filterForPolicy(requestIdentity(ctx, w), e.srv, kindPrompts, e.g.forward(ctx, w, e.srv, m.Method, m.Params, m.ID, related))
	case "resources/list":
		return e.g.filterForPolicy(requestIdentity(ctx, w), e.srv, kindResources, e.g.forward(ctx, w, e.srv, m.Method, m.Params, m.ID, related))
	case "resources/templates/list":
		return e.g.filterForPolicy(requestIdentity(ctx, w), e.srv, kindTemplates, e.g.forward(ctx, w, e.srv, m.Method, m.Params, m.ID, related))
	}
	return e.g.forward(ctx, w, e.srv, m.Method, m.Params, m.ID, related)
}

func (e *single) Stateless(ctx context.Context, m *rpc.Message, mo *Modern, related Sink) *rpc.Message {
	return e.g.answer(ctx, nil, m, mo, related, e)
}

func (e *single) endpointServer() *fleet.Server { return e.srv }

func (e *single) discoverModern(ctx context.Context, m *rpc.Message) *rpc.Message {
	// The shared instance's (mcpvisor's own, which learns the lists): a
	// per-session server runs no instance for a request that serves no
	// client's session.
	in, err := e.init(ctx, "")
	if err != nil {
		return unavailable(m.ID, rpc.BackendUnavailable, err.Error(), err)
	}
	return discover(m, modernCaps(in.Capabilities), in.ServerInfo, in.Instructions, e.scope(m.Method))
}

// resourceServer is the server of every resource the endpoint serves.
func (e *single) resourceServer(context.Context, string) *fleet.Server { return e.srv }

func (e *single) watched(kind string) bool { return e.srv.Catalog().AnnouncesChanges(kind) }

// toolSchema is the inputSchema of the server's tool name, from its
// cached list (learned first if need be, within the server's request
// timeout, a start included), or nil.
func (e *single) toolSchema(ctx context.Context, name string) (json.RawMessage, error) {
	lctx, cancel := fleet.WithTimeout(ctx, e.srv.Config().RequestTimeout)
	defer cancel()
	items, err := e.srv.Catalog().List(lctx, catalog.Tools)
	if err != nil {
		if lctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, context.Cause(lctx))
		}
		if strings.HasPrefix(err.Error(), "server "+e.srv.Name()+" ") {
			return nil, err // it names the server: said once
		}
		return nil, fmt.Errorf("server %s's tools could not be learned: %w", e.srv.Name(), err)
	}
	if len(items) == 0 {
		return nil, nil
	}
	idx := e.schemas.Load()
	if idx == nil || idx.first != &items[0] || idx.n != len(items) {
		// The fleet's cached list is the same slice until it is learned
		// again: indexed once per list, not scanned per call.
		idx = &schemaIndex{first: &items[0], n: len(items)}
		for _, it := range items {
			if !bytes.Contains(it, mcpHeaderKey) {
				continue // no annotation: nothing to check for it
			}
			if n, _ := rpc.StringMember(it, "name"); n != "" {
				if idx.byName == nil {
					idx.byName = map[string]json.RawMessage{}
				}
				idx.byName[n] = rpc.Member(it, "inputSchema")
			}
		}
		e.schemas.Store(idx)
	}
	return idx.byName[name], nil
}

// scope is the cacheScope of the server's results of method: private when
// mcpvisor's tool filter or per-session instances shape them, and for
// resources/read; else public.
func (e *single) scope(method string) string {
	cfg := e.srv.Config()
	if method == "resources/read" || len(cfg.Tools.Allow) > 0 || len(cfg.Tools.Deny) > 0 || fleet.Private(cfg) || e.g.filtering() {
		return scopePrivate
	}
	return scopePublic
}

// unusable answers a request, initialize included, of an identity the
// policy lets use nothing of the server — before it can start an
// instance for them, or lease one — else nil. ping is answered.
func (e *single) unusable(ctx context.Context, w sender, m *rpc.Message) *rpc.Message {
	p := e.g.policy.Load()
	if p.Empty() || m.Method == "ping" {
		return nil
	}
	who := requestIdentity(ctx, w)
	if who.Decided() || p.MayUse(who, e.srv.Name()) {
		return nil
	}
	e.g.denials.Add(1)
	e.g.auditUnusable(receiverOf(ctx), who, "/servers/"+e.srv.Name()+"/mcp", e.srv.Name(), m.Method)
	return errorResponse(m.ID, rpc.NotPermitted, notPermitted)
}

// init is the server's initialize result: the cached one of a dormant or
// never-started server, else its live connection's (starting it).
func (e *single) init(ctx context.Context, session string) (*fleet.InitResult, error) {
	if in := e.srv.Catalog().ColdInit(); in != nil {
		return in, nil // else running (its live result), or nothing cached
	}
	cfg := e.srv.Config()
	sctx, cancel := fleet.WithTimeout(ctx, fleet.MinTimeout(fleet.StartWait(cfg.InitTimeout), cfg.RequestTimeout))
	defer cancel()
	l, err := e.srv.Acquire(sctx, session)
	if err != nil {
		return nil, err // it names the server
	}
	conn := l.Conn()
	l.Release()
	if conn == nil {
		return nil, fmt.Errorf("server %s is unavailable: no MCP connection", e.srv.Name())
	}
	return conn.Init(), nil
}

// heldTool is the error of a call of a tool a pinned server holds back:
// it names the command that approves it.
func heldTool(id json.RawMessage, he *catalog.HeldError) *rpc.Message {
	data := map[string]string{"server": he.Server, "tool": he.Tool, "reason": "held", "approve": "mcpvisor tools approve " + he.Server + " " + he.Tool}
	if he.Unlisted {
		data = map[string]string{"server": he.Server, "tool": he.Tool, "reason": "unlisted"}
	}
	return &rpc.Message{ID: id, Error: &rpc.Error{Code: rpc.InvalidParams, Message: he.Error(), Data: mustJSON(data)}}
}

// filterTools drops the tools that allowed rejects (given each as the
// server sent it) from a tools/list result, keeping every other member
// as it was.
func filterTools(result json.RawMessage, allowed func(json.RawMessage) bool) json.RawMessage {
	var body map[string]json.RawMessage
	var tools []json.RawMessage
	if json.Unmarshal(result, &body) != nil || json.Unmarshal(body["tools"], &tools) != nil {
		return result
	}
	kept := tools[:0]
	for _, t := range tools {
		if allowed(t) {
			kept = append(kept, t)
		}
	}
	body["tools"] = mustJSON(nonNil(kept))
	return mustJSON(body)
}

// setLevelSingle records the session's log level and forwards the request
// to the server (starting it, as every request on this endpoint may) with
// the level the instance must run at: the most verbose that any of its
// sessions asked for. The server's refusal is the client's answer, and
// the level is then not kept.
func (g *Gateway) setLevelSingle(ctx context.Context, s *Session, srv *fleet.Server, m *rpc.Message, related Sink) *rpc.Message {
	level := stringField(m.Params, "level")
	if interest.LogSeverity(level) < 0 {
		return errorResponse(m.ID, rpc.InvalidParams, fmt.Sprintf("invalid log level %q: one of debug, info, notice, warning, error, critical, alert, emergency", level))
	}
	g.interests.SetLogLevel(srv, s.Key(), bookInstance(srv, legacySender(s)), level)
	params, ok := rpc.ReplaceMember(m.Params, "level", mustJSON(g.interests.EffectiveLogLevel(srv, bookInstance(srv, legacySender(s)))))
	if !ok {
		params = m.Params
	}
	resp := g.forward(ctx, legacySender(s), srv, m.Method, params, m.ID, related)
	if resp.Error != nil {
		g.interests.SetLogLevel(srv, s.Key(), bookInstance(srv, legacySender(s)), "")
	}
	return resp
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

const latestVersion = backend.ProtocolVersion

func supported(v string) bool { return backend.Supported(v) }

// single is the endpoint of one server: every method is forwarded as it
// is, including methods mcpvisor does not know, except the handshake
// (mcpvisor's connection to the server is already initialized) and ping.
type single struct {
	g   *Gateway
	srv *fleet.Server
}

func (e *single) Open(out Sink) *Session {
	s := NewSession(out)
	e.g.open(s, e.srv.Name())
	return s
}

func (e *single) Close(s *Session) { e.g.closeSession(s) }

func (e *single) Handle(ctx context.Context, s *Session, m *rpc.Message, related Sink) *rpc.Message {
	s.Touch()
	if e.g.clientMessage(s, m) {
		return nil
	}
	if m.IsNotification() {
		for _, c := range e.srv.Running() {
			_ = c.Notify(m.Method, m.Params)
		}
		return nil
	}
	if m.IsResponse() {
		return nil
	}
	switch m.Method {
	case "initialize":
		// A dormant or never-started server answers from its cached
		// initialize result; it starts on the first real request.
		if raw := e.g.catalogs[e.srv.Name()].getInit(); raw != nil && e.srv.Current() == nil {
			if in, err := backend.ParseInit(raw); err == nil {
				return e.g.initialize(s, m, in.Capabilities, in.ServerInfo, in.Instructions)
			}
		}
		cfg := e.srv.Config()
		sctx, cancel := context.WithTimeout(ctx, cfg.InitTimeout)
		defer cancel()
		e.srv.Begin(s.Key())
		c, err := e.srv.Conn(sctx, s.Key())
		e.srv.End(s.Key())
		if err != nil {
			return errorResponse(m.ID, rpc.BackendUnavailable, fmt.Sprintf("server %s is unavailable: %v", e.srv.Name(), err))
		}
		in := c.Init()
		return e.g.initialize(s, m, in.Capabilities, in.ServerInfo, in.Instructions)
	case "ping":
		return resultResponse(m.ID, json.RawMessage(`{}`))
	case "tools/call":
		f := e.srv.Config().Tools
		if len(f.Allow) == 0 && len(f.Deny) == 0 {
			break
		}
		if name := stringField(m.Params, "name"); !f.Allowed(name) {
			return errorResponse(m.ID, rpc.InvalidParams, "tool "+name+" is not allowed by mcpvisor's configuration")
		}
	case "tools/list":
		resp := e.g.forward(ctx, s, e.srv, m.Method, m.Params, m.ID, related)
		if f := e.srv.Config().Tools; (len(f.Allow) > 0 || len(f.Deny) > 0) && resp.Result != nil {
			resp.Result = filterTools(resp.Result, f.Allowed)
		}
		return resp
	case "resources/subscribe", "resources/unsubscribe":
		e.g.subscribe(s, m.Method, stringField(m.Params, "uri"))
	}
	return e.g.forward(ctx, s, e.srv, m.Method, m.Params, m.ID, related)
}

// filterTools drops the tools that allowed rejects from a tools/list
// result, keeping every other member as it was.
func filterTools(result json.RawMessage, allowed func(string) bool) json.RawMessage {
	var body map[string]json.RawMessage
	var tools []json.RawMessage
	if json.Unmarshal(result, &body) != nil || json.Unmarshal(body["tools"], &tools) != nil {
		return result
	}
	kept := tools[:0]
	for _, t := range tools {
		if allowed(stringField(t, "name")) {
			kept = append(kept, t)
		}
	}
	body["tools"] = mustJSON(nonNil(kept))
	return mustJSON(body)
}

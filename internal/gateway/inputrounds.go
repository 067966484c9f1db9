package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/revision"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Legacy clients of modern servers. A modern server is not initialized:
// each request of a legacy session gets the _meta the session's initialize
// implies (legacyMeta), and an input_required result becomes ordinary
// requests to the client, whose answers go back to the server on a retry
// of the request (fulfil) — the client sees only the final result.

// maxInputRounds bounds the input_required rounds of one request.
const maxInputRounds = 16

// inputWait bounds how long a client has to answer a request it was sent
// (a server's, relayed; or mcpvisor's own, for a modern server's input).
const inputWait = 5 * time.Minute

// legacyMeta gives params, those of s's request of method, the _meta of a
// modern request on behalf of the legacy session s: the modern version,
// the capabilities its initialize declared, and the log level it set on
// srv; what params' own _meta has (a progress token) stays. The members
// only the legacy era gives a request (a task augmentation, which no
// modern server declared) are left out.
func (g *Gateway) legacyMeta(c *call, srv *fleet.Server, method string, params json.RawMessage) json.RawMessage {
	if drop := revision.LegacyRequestMembers(method); drop != nil {
		params = rpc.DropMembers(params, drop, nil)
	}
	narrow := srv.Config().ClientCapabilities != nil
	var caps json.RawMessage
	g.reg.capsOf(c, func(declared map[string]json.RawMessage) {
		if !narrow {
			caps = mustJSON(declared)
			return
		}
		// Of the capabilities mcpvisor carries, only those the server's
		// config lets it declare.
		kept := make(map[string]json.RawMessage, len(declared))
		for name, v := range declared {
			if !withheld(srv.Config(), name) {
				kept[name] = v
			}
		}
		caps = mustJSON(kept)
	})
	if string(caps) == "null" {
		caps = json.RawMessage(`{}`)
	}
	meta := map[string]json.RawMessage{}
	if old := rpc.Member(params, "_meta"); old != nil {
		_ = json.Unmarshal(old, &meta)
	}
	meta[metaProtocolVersion] = mustJSON(modernVersion)
	meta[metaClientCaps] = caps
	if lvl := g.interests.EffectiveLogLevel(srv, bookInstance(srv, c.from)); lvl != "" {
		meta[metaLogLevel] = mustJSON(lvl)
	}
	return rpc.SetMember(params, "_meta", mustJSON(meta))
}

// fulfil answers a modern server's input_required results for the legacy
// client of call c (on srv, whose config may declare less; nil: no
// config): each input request goes to the client as a request of
// its own, and the request is sent again with the answers, until the
// server's result is complete (or maxInputRounds). The request's own end
// while the client is asked (ctx done) is returned as the error: ctx's
// cause.
func (g *Gateway) fulfil(ctx context.Context, c *call, srv *fleet.Server, conn fleet.Conn, method string, params json.RawMessage, resp *rpc.Message) (*rpc.Message, error) {
	for round := 0; ; round++ {
		var r struct {
			ResultType    string `json:"resultType"`
			InputRequests map[string]struct {
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			} `json:"inputRequests"`
			RequestState *string `json:"requestState"`
		}
		if resp.Error != nil || json.Unmarshal(resp.Result, &r) != nil || r.ResultType != "input_required" {
			return resp, nil
		}
		if round == maxInputRounds {
			return &rpc.Message{Error: &rpc.Error{Code: rpc.InternalError, Message: fmt.Sprintf("server %s asked for input %d times; mcpvisor gave up", conn.Name(), maxInputRounds)}}, nil
		}
		answers := map[string]json.RawMessage{}
		for key, in := range r.InputRequests {
			if capName := capabilityOf(in.Method); capName != "" && srv != nil && !srv.Config().Declares(capName) {
				return &rpc.Message{Error: &rpc.Error{Code: rpc.InternalError, Message: fmt.Sprintf("server %s asked for %s, but mcpvisor's configuration declares no %s capability to it", conn.Name(), in.Method, capName)}}, nil
			}
			a, err := g.askClient(ctx, c, in.Method, in.Params)
			if err != nil && ctx.Err() != nil {
				// The request itself ended (the client cancelled it, its
				// session closed, its timeout ran out): it ends as that,
				// not as the server's failure.
				return nil, context.Cause(ctx)
			}
			if err != nil {
				return &rpc.Message{Error: &rpc.Error{Code: rpc.InternalError, Message: fmt.Sprintf("server %s asked for %s, which the client could not give: %v", conn.Name(), in.Method, err)}}, nil
			}
			answers[key] = revision.ToModernClientResult(in.Method, a)
		}
		retry := rpc.SetMember(params, "inputResponses", mustJSON(answers))
		if r.RequestState != nil {
			retry = rpc.SetMember(retry, "requestState", mustJSON(*r.RequestState))
		}
		var err error
		if resp, err = conn.Call(ctx, method, retry); err != nil {
			return nil, err
		}
	}
}

// capabilityOf names the client capability a server request needs.
func capabilityOf(method string) string {
	switch method {
	case "sampling/createMessage":
		return "sampling"
	case "elicitation/create":
		return "elicitation"
	case "roots/list":
		return "roots"
	}
	return ""
}

// capMethod is the server request that needs client capability name
// (capabilityOf's inverse).
func capMethod(name string) string {
	switch name {
	case "sampling":
		return "sampling/createMessage"
	case "elicitation":
		return "elicitation/create"
	case "roots":
		return "roots/list"
	}
	return ""
}

var errNotDeclared = errors.New("the client did not declare the capability")

// askClient sends the legacy client of c a request on c's stream and waits
// for its answer's result, within ctx and inputWait.
func (g *Gateway) askClient(ctx context.Context, c *call, method string, params json.RawMessage) (json.RawMessage, error) {
	capName := capabilityOf(method)
	var declared bool
	g.reg.capsOf(c, func(caps map[string]json.RawMessage) { _, declared = caps[capName] })
	if capName == "" || !declared {
		return nil, fmt.Errorf("%w (%s)", errNotDeclared, method)
	}
	ours := secretID("mcpv-r-")
	r := &outReq{call: c, sess: c.from.sess, answer: make(chan *rpc.Message, 1)}
	r.timer = time.NewTimer(inputWait)
	defer r.timer.Stop()
	if err := g.sendOutReq(c, ours, r, method, params); err != nil {
		return nil, err
	}
	select {
	case m := <-r.answer:
		if m.Error != nil {
			return nil, fmt.Errorf("the client answered with an error: %s", m.Error.Message)
		}
		return m.Result, nil
	case <-r.timer.C:
		g.reg.takeOutReq(ours)
		return nil, fmt.Errorf("the client did not answer within %v", inputWait)
	case <-ctx.Done():
		g.reg.takeOutReq(ours)
		return nil, context.Cause(ctx)
	}
}

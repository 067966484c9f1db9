package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/interest"
	"github.com/mcpvisor/mcpvisor/internal/revision"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// MCP 2026-07-28 ("modern", basic/versioning) has no session and no
// initialize: every request carries its protocol version, the client's
// capabilities and, usually, the client's identity in params._meta, and is
// served on its own. mcpvisor serves both eras on every endpoint: a request
// with modern _meta statelessly, an initialize as the opening of a legacy
// session.

// modernKeyPrefix begins the key of every modern request (modernReq), and
// no session's (legacy sessions' begin with "s": NewSession).
const modernKeyPrefix = "m"

// ModernSession reports whether key is a modern request's
// (fleet.ModernSessions): a per-session server's instance for it serves
// that request alone, in the modern era.
func (g *Gateway) ModernSession(key string) bool { return strings.HasPrefix(key, modernKeyPrefix) }

// modernVersion is the modern revision mcpvisor serves.
const modernVersion = revision.ModernVersion

// supportedVersions are every revision mcpvisor serves, newest first: the
// modern one per request, the legacy ones in sessions opened by initialize.
var supportedVersions = append([]string{modernVersion}, frontVersions...)

// The _meta keys of the modern revision.
const (
	metaProtocolVersion = revision.MetaProtocolVersion
	metaClientCaps      = revision.MetaClientCaps
	metaClientInfo      = revision.MetaClientInfo
	metaLogLevel        = revision.MetaLogLevel
	metaServerInfo      = revision.MetaServerInfo
)

// Modern is what a modern request says about its client in params._meta.
type Modern struct {
	Version    string          // protocolVersion
	Caps       json.RawMessage // clientCapabilities: an object
	ClientInfo json.RawMessage // clientInfo, if given
	LogLevel   string          // logLevel, if given: the request wants log messages this severe

	// Read from params in the same scan: the name (tools/call,
	// prompts/get) or uri (resources/read) the request targets, and its
	// requestState (a retry's), and the taskId (tasks/get, tasks/update,
	// tasks/cancel).
	Name, URI, State, TaskID string

	// client is the session of the stdio connection the request came on
	// (nil over HTTP): see sender.requester.
	client *Session
	// front is the front the request came on, which a call held for the
	// client's retry answers to (nil: none, as in tests).
	front *heldFront
	// ctx and cancel, if set, are the context the request is served in
	// (the front's, which ends it with the request) and its cancel: the
	// one forward of the request that gets ctx itself takes it for its
	// own, so that the request's context is not derived again.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// hasToken: the request's _meta has a progressToken (read in the same
	// scan, so that forwarding need not look for it again).
	hasToken bool
}

// modernVersionOf is the protocol version in params._meta, "" if there is
// none: a request without it is a legacy one (stdio tells the eras apart
// by it; HTTP by the MCP-Protocol-Version header).
func modernVersionOf(params json.RawMessage) (string, bool) {
	meta := rpc.Member(params, "_meta")
	if meta == nil {
		return "", false
	}
	return rpc.StringMember(meta, metaProtocolVersion)
}

// readModern reads a modern request's _meta. A request without the
// members every modern request carries — _meta, its protocolVersion and
// clientCapabilities — gets an InvalidParams error (basic/index: both are
// required), with its id.
func readModern(m *rpc.Message) (*Modern, *rpc.Message) {
	var top [5]json.RawMessage
	rpc.MembersInto(top[:], m.Params, "_meta", "name", "uri", "requestState", "taskId")
	meta := top[0]
	if meta == nil {
		return nil, errorResponse(m.ID, rpc.InvalidParams,
			"Invalid params: a "+modernVersion+" request carries params._meta with "+metaProtocolVersion+" and "+metaClientCaps)
	}
	if len(meta) == 0 || meta[0] != '{' {
		return nil, errorResponse(m.ID, rpc.InvalidParams, "Invalid params: params._meta is not an object")
	}
	var v [5]json.RawMessage
	rpc.MembersInto(v[:], meta, metaProtocolVersion, metaClientCaps, metaClientInfo, metaLogLevel, "progressToken")
	raw := struct{ Version, Caps, ClientInfo, LogLevel json.RawMessage }{v[0], v[1], v[2], v[3]}
	mo := &Modern{hasToken: v[4] != nil}
	mo.Name, _ = rpc.String(top[1])
	mo.URI, _ = rpc.String(top[2])
	mo.State, _ = rpc.String(top[3])
	mo.TaskID, _ = rpc.String(top[4])
	if string(raw.Version) == `"`+modernVersion+`"` {
		mo.Version = modernVersion // the usual case, without a copy
	} else {
		mo.Version, _ = rpc.String(raw.Version)
	}
	if mo.Version == "" {
		return nil, errorResponse(m.ID, rpc.InvalidParams, "Invalid params: params._meta lacks "+metaProtocolVersion+" (a string)")
	}
	if len(raw.Caps) == 0 || raw.Caps[0] != '{' {
		return nil, errorResponse(m.ID, rpc.InvalidParams, "Invalid params: params._meta lacks "+metaClientCaps+" (an object; {} declares none)")
	}
	mo.Caps = raw.Caps
	mo.ClientInfo = raw.ClientInfo
	if len(raw.LogLevel) > 0 {
		var ok bool
		if mo.LogLevel, ok = rpc.String(raw.LogLevel); !ok || interest.LogSeverity(mo.LogLevel) < 0 {
			return nil, errorResponse(m.ID, rpc.InvalidParams, "Invalid params: "+metaLogLevel+" is not a log level (debug, info, notice, warning, error, critical, alert, emergency)")
		}
	}
	return mo, nil
}

// unsupportedVersion is the UnsupportedProtocolVersionError for a modern
// request at a version mcpvisor does not serve per request, or nil.
func unsupportedVersion(m *rpc.Message, version string) *rpc.Message {
	if version == modernVersion {
		return nil
	}
	data := mustJSON(map[string]any{"supported": supportedVersions, "requested": version})
	msg := "Unsupported protocol version " + strconv.Quote(version) + ": per request mcpvisor serves " + modernVersion +
		"; the earlier revisions open a session with initialize"
	return &rpc.Message{ID: m.ID, Error: &rpc.Error{Code: rpc.UnsupportedProtocolVersion, Message: msg, Data: data}}
}

// removedMethod reports whether method is a legacy one the modern revision
// removed (changelog: the handshake, ping, logging/setLevel, and resource
// subscriptions, which subscriptions/listen replaces).
func removedMethod(method string) bool { return !revision.Has(revision.Modern, method) }

// cacheable reports whether method's complete results carry ttlMs and
// cacheScope (server/utilities/caching).
func cacheable(method string) bool { return revision.Cacheable(method) }

// Cache scopes.
const (
	scopePublic  = `"public"`
	scopePrivate = `"private"`
)

// completeResultTTL makes a result modern (revision.ToModernResult), with
// ttl (ms) as the ttlMs it adds for a cacheable method. An error is left
// as it is.
func completeResultTTL(method string, resp *rpc.Message, scope string, ttl int) {
	if resp.Result != nil {
		resp.Result = revision.ToModernResult(method, resp.Result, ttl, scope)
	}
}

// discover answers server/discover: the versions mcpvisor serves, the
// endpoint's capabilities, and who answers.
func discover(m *rpc.Message, caps, serverInfo json.RawMessage, instructions string, scope string) *rpc.Message {
	res := map[string]any{
		"resultType":        "complete",
		"supportedVersions": supportedVersions,
		"capabilities":      caps,
		"_meta":             map[string]json.RawMessage{metaServerInfo: serverInfo},
		"ttlMs":             0,
		"cacheScope":        json.RawMessage(scope),
	}
	if instructions != "" {
		res["instructions"] = instructions
	}
	return resultResponse(m.ID, mustJSON(res))
}

// modernCaps are capabilities as a modern client reads them: the same,
// list changes and resource subscriptions coming by subscriptions/listen.
func modernCaps(caps json.RawMessage) json.RawMessage {
	if len(caps) == 0 {
		return json.RawMessage(`{}`)
	}
	return caps
}

// statelessPlan is what an endpoint brings to serving a modern request
// (an interface, not a struct of funcs: a request allocates nothing for it).
type statelessPlan interface {
	endpointServer() *fleet.Server                                   // nil for the aggregated endpoint
	discoverModern(context.Context, *rpc.Message) *rpc.Message       // its server/discover answer
	scope(method string) string                                      // the cacheScope of method's results
	resourceServer(ctx context.Context, uri string) *fleet.Server    // the server of a resource
	handle(context.Context, sender, *rpc.Message, Sink) *rpc.Message // its handler (uncounted: see answer)
	// watched reports whether every server of the endpoint announces the
	// changes of its lists of capability kind.
	watched(kind string) bool
}

// serveStateless serves a modern request on an endpoint: discover,
// removed methods, a retry of a held call, subscriptions/listen, and
// everything else by the endpoint's handler on a session of the request's
// own, the result made modern.
func (g *Gateway) serveStateless(ctx context.Context, m *rpc.Message, mo *Modern, related Sink, p statelessPlan) *rpc.Message {
	var resp *rpc.Message
	server := p.endpointServer()
	switch {
	case m.Method == "server/discover":
		return p.discoverModern(ctx, m)
	case removedMethod(m.Method):
		return errorResponse(m.ID, rpc.MethodNotFound, "method not found: "+m.Method+" is not part of MCP "+modernVersion)
	case strings.HasPrefix(m.Method, "notifications/"):
		// A client's notification sent as a request: no endpoint serves
		// it as one (a server would not answer it), so it is refused here
		// on both, at once.
		return errorResponse(m.ID, rpc.MethodNotFound, "method not found: "+m.Method+" is a notification: send it without an id")
	case m.Method == "subscriptions/listen":
		return g.listen(ctx, server, m, mo, related, p.resourceServer)
	case mrtrMethod(m.Method) && strings.HasPrefix(g.inner(mo.State), statePrefix):
		// A retry of a call mcpvisor holds (its requestState is
		// mcpvisor's; any other is the server's own, and passes).
		resp = g.resumeHeld(ctx, m, mo, mo.State, server, related)
	default:
		resp = g.stateless(ctx, server, m, mo, related, p)
	}
	ttl, scope := 0, ""
	if cacheable(m.Method) {
		scope = p.scope(m.Method)
		if listKind(m.Method) != "" && p.watched(listKind(m.Method)) {
			ttl = listTTL
		}
	}
	completeResultTTL(m.Method, resp, scope, ttl)
	return resp
}

// listTTL is the ttlMs of a list whose every server tells mcpvisor when it
// changes: mcpvisor then knows of a change as it happens (and tells
// listeners), so a client may keep the list this long between them.
const listTTL = 60_000

// listKind is the capability a list method belongs to, or "".
func listKind(method string) string {
	switch method {
	case "tools/list":
		return "tools"
	case "prompts/list":
		return "prompts"
	case "resources/list", "resources/templates/list":
		return "resources"
	}
	return ""
}

// stateless serves one modern request on an endpoint whose handler is
// p's: as a request of its own (modernReq), which no message outside it
// reaches and whose end ends the per-session instances it ran (and
// nothing else in the fleet). server is the endpoint's server (nil for the
// aggregated one).
func (g *Gateway) stateless(ctx context.Context, server *fleet.Server, m *rpc.Message, mo *Modern, related Sink, p statelessPlan) *rpc.Message {
	r := g.newModernReq(server, m, mo, identity.FromContext(ctx))
	resp := p.handle(ctx, sender{req: r}, m, related)
	if r.held == nil {
		g.endModernReq(r) // else the held call ends it at its end
	}
	return resp
}

// noSink refuses every message: the stream of what a modern request, or
// a listener's subscriptions, relates to no request.
var noSink = SinkFunc(func(*rpc.Message) error { return ErrNoStream })

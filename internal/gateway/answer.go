package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// A client request either reaches a server — forward counts it in that
// server's metrics and makes its span (flight) — or mcpvisor answers it
// itself: the handshake, ping, the aggregated endpoint's lists,
// server/discover, a call of an unknown or denied tool, logging/setLevel
// on the aggregated endpoint, a retry of a held call, a method it does not
// serve. answer counts the latter in the gateway's Local and, with tracing
// on, makes their span, so that every request an endpoint answers is
// counted once, in one place or the other.

// forwardMarker is a request's related Sink that learns whether the
// request was forwarded: forward marks it. The fronts' own per-request
// sinks are markers (postStream, batchSink): serving a request over HTTP
// allocates nothing for it. Only the request's own goroutine marks and
// reads it.
type forwardMarker interface {
	markForwarded()
	wasForwarded() bool
}

// markSink makes a related Sink that is not a marker (stdio's, shared by
// the connection's requests) one, for one request.
type markSink struct {
	Sink
	forwarded bool
}

func (m *markSink) markForwarded()     { m.forwarded = true }
func (m *markSink) wasForwarded() bool { return m.forwarded }

// answer serves a client message on endpoint p — a legacy session's (s,
// mo nil) or a modern request (s nil, mo its _meta) — and, if it is a
// request that reached no server, counts it (LocalRequests) and makes its
// span.
func (g *Gateway) answer(ctx context.Context, s *Session, m *rpc.Message, mo *Modern, related Sink, p statelessPlan) *rpc.Message {
	if !m.IsRequest() {
		return p.handle(ctx, legacySender(s), m, related)
	}
	var start time.Time
	if g.tracing != nil {
		start = time.Now()
	}
	fm, ok := related.(forwardMarker)
	if !ok {
		ms := &markSink{Sink: related}
		related, fm = ms, ms
	}
	var resp *rpc.Message
	if mo != nil {
		resp = g.serveStateless(ctx, m, mo, related, p)
	} else {
		resp = p.handle(ctx, legacySender(s), m, related)
	}
	if fm.wasForwarded() {
		return resp
	}
	o, code := localOutcome(ctx, resp)
	g.local.Record(m.Method, o)
	if g.tracing != nil {
		g.traceAnswered(ctx, start, s, m, mo, resp, o, code)
	}
	return resp
}

// localOutcome is how a request mcpvisor answered itself ended, and the
// JSON-RPC error code of a protocol error.
func localOutcome(ctx context.Context, resp *rpc.Message) (telemetry.Outcome, int) {
	switch {
	case resp == nil:
		return telemetry.ProtocolError, rpc.InternalError // answered (fronts) as "no response"
	case resp.Error == nil:
		return telemetry.OK, 0
	case ctx.Err() != nil:
		return telemetry.Cancelled, 0
	}
	switch resp.Error.Code {
	case rpc.BackendUnavailable, rpc.LimitReached:
		return telemetry.Unavailable, 0
	case rpc.RequestTimeout:
		return telemetry.Timeout, 0
	}
	return telemetry.ProtocolError, resp.Error.Code
}

// traceAnswered makes the span of a request mcpvisor answered itself.
func (g *Gateway) traceAnswered(ctx context.Context, start time.Time, s *Session, m *rpc.Message, mo *Modern, resp *rpc.Message, o telemetry.Outcome, code int) {
	e := telemetry.End{Outcome: o, Code: code, RequestID: m.ID}
	if resp != nil && resp.Error != nil {
		e.Message = resp.Error.Message
	}
	switch {
	case mo != nil:
		e.Protocol = modernVersion
	case s != nil:
		e.Protocol = g.reg.protocolOf(s)
		if e.Protocol == "" && m.Method == "initialize" && resp != nil && resp.Error == nil {
			e.Protocol = negotiated(resp)
		}
		if s.ID != "" {
			e.SessionID = s.Key() // as flight's spans name it
		}
	}
	g.tracing.Answered(ctx, start, m.Method, m.Params, e)
}

// What a front refuses before its endpoint sees it — a body that is not
// JSON-RPC, an unknown session, a header that does not match the body, a
// limit, ... — the endpoint never counts: the front does, through the
// endpoint's gateway (refuse), in the same Local, so that every client
// message is counted once, whoever answers it. An HTTP request that
// carries no JSON-RPC message (a GET, a DELETE, another HTTP method, one
// the access guard stops) is counted by reason instead (refusedHTTP).

// gatewayEndpoint is an endpoint of a Gateway (the aggregated one, a
// server's own): its fronts count what they refuse in the gateway's Local.
// Other endpoints (tests') count nothing.
type gatewayEndpoint interface {
	gateway() *Gateway
}

func (a *aggregate) gateway() *Gateway { return a.g }
func (e *single) gateway() *Gateway    { return e.g }

// gatewayOf is ep's gateway, or nil.
func gatewayOf(ep Endpoint) *Gateway {
	if ge, ok := ep.(gatewayEndpoint); ok {
		return ge.gateway()
	}
	return nil
}

// refuse counts a client message a front refused before an endpoint saw
// it and, with tracing on, makes its span (mcpvisor.local and
// mcpvisor.refused; it marks the moment of the refusal). m is the message
// as far as it was read (nil: not at all): its method (none: Other) and
// params (for a trace context in _meta); id is the id the error reply
// carries (nil or null: none); code the reply's JSON-RPC error code, 0 if
// the reply is no JSON-RPC error; msg what it says. The outcome is
// unavailable for a limit or a shutdown, else a protocol error. Safe on a
// nil g (an endpoint of no gateway): nothing is counted.
func (g *Gateway) refuse(ctx context.Context, m *rpc.Message, id json.RawMessage, o telemetry.Outcome, code int, msg string) {
	if g == nil {
		return
	}
	var method string
	var params json.RawMessage
	if m != nil {
		method, params = m.Method, m.Params
	}
	g.local.Record(method, o)
	if g.tracing == nil {
		return
	}
	if string(id) == "null" {
		id = nil
	}
	if o != telemetry.ProtocolError {
		code = 0
	}
	g.tracing.Answered(ctx, time.Now(), method, params, telemetry.End{Outcome: o, Code: code, Message: msg, RequestID: id, Refused: true})
}

// refusalOutcome is the outcome of a refusal whose JSON-RPC error code is
// code: unavailable for mcpvisor's limits, else a protocol error.
func refusalOutcome(code int) telemetry.Outcome {
	switch code {
	case rpc.LimitReached, rpc.BackendUnavailable:
		return telemetry.Unavailable
	}
	return telemetry.ProtocolError
}

// refusedHTTP counts an HTTP request refused for r that carries no
// JSON-RPC message. Safe on a nil g.
func (g *Gateway) refusedHTTP(r telemetry.Refusal) {
	if g != nil {
		g.local.RecordRefusal(r)
	}
}

// LocalRequests counts the client requests mcpvisor answered itself and
// the client messages its fronts refused, by method and outcome (those
// forwarded to a server are counted in the server's telemetry), and the
// HTTP requests without a JSON-RPC message its fronts refused, by reason.
func (g *Gateway) LocalRequests() *telemetry.Local { return &g.local }
